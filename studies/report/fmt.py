"""Number formatting shared by the studies' report sections."""
from __future__ import annotations

import math


def num(x, fmt: str = "{:.3g}") -> str:
    """A number as ``fmt``; "n/a" for None and for non-finite values (saved as strings such as "nan")."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        return "n/a"
    return fmt.format(v) if math.isfinite(v) else "n/a"
