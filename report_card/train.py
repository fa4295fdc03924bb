"""``python -m report_card.train --correction FILE -- <llm_runs.train flags>``: one training run of a
correction defined outside the package. The file is imported first (its registration is what the
run's ``--estimator`` names), then :func:`llm_runs.train.main` runs unchanged."""
from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) < 3 or argv[0] != "--correction" or argv[2] != "--":
        print("usage: python -m report_card.train --correction FILE -- <llm_runs.train flags>", file=sys.stderr)
        return 2
    from .load import load_correction

    load_correction(argv[1])
    from llm_runs.train import main as train_main

    return train_main(argv[3:])


if __name__ == "__main__":
    sys.exit(main())
