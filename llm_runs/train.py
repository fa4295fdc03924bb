"""The command line of one training run (the loop itself is :class:`llm_runs.trainer.Trainer`).

    python -m llm_runs.train --preset tiny-cpu --estimator gmc --eps 0.2 --delay 8 \\
        --group-size 8 --steps 200 --seed 0 --out results/llm/<run>      [--resume]

Every field of :class:`llm_runs.config.TrainConfig` is a ``--flag`` of the same name; ``--help`` names
each one's symbol in THEORY.md. An estimator's knob is field ``<estimator>_<knob>``, flag
``--<estimator>-<knob>`` (``--seq-geo-mask-c``), derived from its record; a field's older name
(:data:`schema.runs.RENAMED_FIELDS`: ``--geo-cap``) still parses, hidden, until 2027-06-01.
Exit status: 0 done, 2 bad settings or a disk fault, 3 a rollout source that failed, 128 + signal
when stopped by SIGINT/SIGTERM (a checkpoint was written), 130 when a second signal stopped it.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

from .config import TrainConfig, config_fields, resolve_config
from .rollout_sources import RolloutSourceError
from .trainer import RunResult, Trainer


def run_config(out: str | os.PathLike, resume: bool, overrides: dict) -> TrainConfig:
    """The config of a run: the stored one when resuming (explicit values must agree with it,
    which :class:`Trainer` checks), else defaults < preset defaults < ``overrides``."""
    if resume:
        from .config import load_run_config

        if not (Path(out) / "config.json").is_file():
            raise ValueError(f"--resume: {out} holds no run (no config.json)")
        return dataclasses.replace(load_run_config(out), **overrides)
    return resolve_config(overrides)


def train(config: TrainConfig | None = None, out: str | os.PathLike | None = None, *, resume: bool = False,
          progress: bool = True, **overrides) -> RunResult:
    """Run (or resume) one training run programmatically; returns a :class:`RunResult`.

    ``train(out="results/llm/demo", estimator="gmc", delay=4, steps=50)`` or
    ``train(out="results/llm/demo", resume=True)``. A pre-built ``config`` may be given instead of
    ``overrides``. SIGINT/SIGTERM end it with ``status == "interrupted"`` and a checkpoint.
    """
    if out is None:
        raise ValueError("out (the run folder) is required")
    if config is None:
        config = run_config(out, resume, overrides)
    elif overrides:
        config = dataclasses.replace(config, **overrides)
    return Trainer(config, out, resume=resume, progress=progress).run()


# --------------------------------------------------------------------------- CLI


def field_flag(field: dataclasses.Field) -> str:
    """``--<field>``, ``_`` written ``-``: the one flag of a config field (an estimator's knob's field is
    ``<estimator>_<knob>``, so its flag is ``--<estimator>-<knob>``: ``--seq-geo-mask-c``)."""
    return f"--{field.name.replace('_', '-')}"


DEPRECATED_FLAGS = {"--num-groups": "prompts_per_step"}
"""Older flags that still parse, hidden (beside the fields of :data:`schema.runs.RENAMED_FIELDS`, whose
older names still parse as flags too): ``{flag: config field}``. Deprecated 2026-12-07, removed after
2027-06-01."""


def deprecated_flags(field: dataclasses.Field) -> list[str]:
    """The hidden older flags of ``field``: its names before :data:`schema.runs.RENAMED_FIELDS` and
    :data:`DEPRECATED_FLAGS`."""
    from schema.runs import RENAMED_FIELDS

    olds = [f"--{old.replace('_', '-')}" for old, new in RENAMED_FIELDS.items() if new == field.name]
    return olds + [flag for flag, name in DEPRECATED_FLAGS.items() if name == field.name]


def cli_flags(overrides: dict) -> list[str]:
    """``python -m llm_runs.train`` flags for config values, ``--<field>=<value>``: the form the trainer
    of every commit parses (a stored config's older field names give their older flags, which that
    commit's trainer took)."""
    flags = []
    for k, v in overrides.items():
        text = ("None" if v is None else json.dumps(v) if isinstance(v, dict)
                else repr(v) if isinstance(v, float) else str(v))
        flags.append(f"--{k.replace('_', '-')}={text}")
    return flags


def _parse_value(field: dataclasses.Field, text: str):
    kind = str(field.type)
    if text.lower() == "none" and "None" in kind:
        return None
    if kind.startswith("dict"):
        value = json.loads(text)
        if not isinstance(value, dict):
            raise argparse.ArgumentTypeError(f"{field_flag(field)} needs a JSON object, got {text!r}")
        return value
    if kind.startswith("bool"):
        if text.lower() in ("true", "1", "yes"):
            return True
        if text.lower() in ("false", "0", "no"):
            return False
        raise argparse.ArgumentTypeError(f"{field_flag(field)}: {text!r} is not true or false")
    for typ in ("int", "float"):
        if kind.startswith(typ):
            try:
                return {"int": int, "float": float}[typ](text)
            except ValueError:
                raise argparse.ArgumentTypeError(f"{field_flag(field)}: {text!r} is not {typ}") from None
    return text


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m llm_runs.train",
        description="GRPO with a controlled rollout delay on a Qwen3-architecture model. Each flag names its "
                    "symbol in THEORY.md in brackets ('-': an engineering setting). The defaults are a regime that "
                    "learns on 2 CPU cores: sums of three one-digit operands, a 1M-parameter Qwen3, 32 prompts x G=8, "
                    "Adam lr 1e-4.")
    parser.add_argument("--out", required=True, help="run folder, e.g. results/llm/<run> (never overwritten)")
    parser.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    for f in config_fields():
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        kind = {"dest": f.name, "default": argparse.SUPPRESS, "type": lambda text, f=f: _parse_value(f, text),
                "metavar": f.name.upper()}
        parser.add_argument(field_flag(f), **kind,
                            help=f"[{f.metadata['symbol']}] {f.metadata['help']} (default: {default!r})")
        for old in deprecated_flags(f):  # hidden: deprecated 2026-12-07, removed after 2027-06-01
            parser.add_argument(old, **kind, help=argparse.SUPPRESS)
    return parser


def _parent_watchdog() -> None:
    """Started by a sweep (``GMC_PARENT_PID``) on a system without PR_SET_PDEATHSIG: SIGTERM ourselves
    (checkpoint after the current update) once the sweep is gone, so no trainer outlives its sweep."""
    parent = os.environ.get("GMC_PARENT_PID", "")
    if sys.platform.startswith("linux") or not parent.isdigit():
        return  # Linux: the sweep set PR_SET_PDEATHSIG (a second SIGTERM would stop without a checkpoint)

    def watch():
        while os.getppid() == int(parent):
            time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="parent-watchdog", daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    _parent_watchdog()
    args = vars(build_parser().parse_args(argv))
    out, resume, progress = args.pop("out"), args.pop("resume"), not args.pop("no_progress")
    try:
        result = train(out=out, resume=resume, progress=progress, **args)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except RolloutSourceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    except OSError as exc:  # a disk or permission fault mid-run: one line, never a traceback
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # a second SIGINT/SIGTERM: stopped without a new checkpoint (any write finished)
        print(f"stopped by a second signal: {out} continues from its last checkpoint with --resume", file=sys.stderr)
        return 130
    if result.status == "interrupted":
        return 128 + int(signal.Signals[result.summary["signal"]])
    s = result.summary
    print(f"done: {result.out}  held-out greedy accuracy {s['heldout_acc_start']:.3f} -> {s['heldout_acc_end']:.3f}, "
          f"pc {s['heldout_pc_start']:.3f} -> {s['heldout_pc_end']:.3f}, {s['step_s_median']:.3f} s/update")
    return 0


if __name__ == "__main__":
    sys.exit(main())
