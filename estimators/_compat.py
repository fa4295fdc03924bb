"""Deprecated keyword names of public functions, kept as aliases of today's names.

>>> import warnings
>>> @renamed_keywords(scheme="estimator")
... def f(estimator):
...     return estimator
>>> with warnings.catch_warnings(record=True) as w:
...     warnings.simplefilter("always")
...     f(scheme="gmc"), w[0].category.__name__
('gmc', 'DeprecationWarning')
"""
from __future__ import annotations

import functools
import warnings

DEPRECATED_ON = "2026-12-07"
"""The date the keyword aliases were deprecated."""
REMOVAL_AFTER = "2027-06-01"
"""The aliases are removed after this date (the warning says so)."""


def renamed_keywords(**old_to_new: str):
    """Decorator: each keyword ``old`` is accepted as ``new`` with a ``DeprecationWarning``;
    both at once is a ``TypeError``. Positional calls and calls by today's names are untouched."""

    def deco(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            if not kwargs or old_to_new.keys().isdisjoint(kwargs):  # the usual call: nothing to rename
                return fn(*args, **kwargs)
            for old, new in old_to_new.items():
                if old in kwargs:
                    if new in kwargs:
                        raise TypeError(f"{fn.__qualname__}() got both {new!r} and its deprecated alias {old!r}")
                    warnings.warn(f"{fn.__qualname__}(): the keyword {old!r} is deprecated since {DEPRECATED_ON} "
                                  f"and removed after {REMOVAL_AFTER}; use {new!r}", DeprecationWarning, stacklevel=2)
                    kwargs[new] = kwargs.pop(old)
            return fn(*args, **kwargs)

        wrapper.__renamed_keywords__ = dict(old_to_new)
        return wrapper

    return deco
