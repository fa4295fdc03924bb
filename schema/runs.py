"""A run folder: its settings (``config.json``, with the fields a run predates read as the values it
used), its metrics table (plain or packed, parsed strictly) and the horizon its task implies.
:mod:`schema.results` describes the whole contract."""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from .sources import MissingResults, read_json


def run_settings(cfg: dict) -> dict:
    """The settings a run is plotted and ranked by, from its ``config.json`` ``config`` block.

    An asynchronous run is placed at its staleness bound: ``delay`` is ``max_staleness``.
    """
    cfg = renamed(cfg)
    mode = cfg.get("mode") or "controlled"
    delay = cfg.get("delay")
    if mode != "controlled" and cfg.get("max_staleness") is not None:
        delay = cfg["max_staleness"]
    return {"estimator": cfg.get("estimator"), "delay": delay, "seed": cfg.get("seed"), "mode": mode,
            "eps": cfg.get("eps"), "steps": cfg.get("steps"), "group_size": cfg.get("group_size"),
            "heldout_size": cfg.get("heldout_size")}


def _legacy_gspo_eps_low(cfg: dict):
    return cfg.get("eps") if cfg.get("estimator") == "gspo" else None  # only GSPO reads it


def _legacy_gspo_eps_high(cfg: dict):
    if cfg.get("estimator") != "gspo":
        return None
    return 4e-4 if cfg.get("eps_high") is None else cfg["eps_high"]


LEGACY_FIELDS: dict[str, tuple] = {
    "amp": (lambda cfg: "none", "no mixed precision existed: float32 throughout"),
    "gspo_eps_low": (_legacy_gspo_eps_low,
                     ("the trainer passed its eps to GSPO as the lower clip: GSPO clipped at 1 - eps (a run of "
                      "another estimator never read it: today's default)")),
    "gspo_eps_high": (_legacy_gspo_eps_high,
                      ("GSPO's upper clip was eps_high when set, else gspo_loss's default 4e-4 (another estimator: "
                       "today's default)")),
    "optimizer": (lambda cfg: "adam", "every RL update used torch.optim.Adam(params, lr)"),
    "momentum": (lambda cfg: 0.0, "Adam has no heavy-ball momentum knob"),
    "weight_decay": (lambda cfg: 0.0, "Adam without weight decay"),
    "mechanism_diagnostics": (lambda cfg: False, "the mech/ columns did not exist"),
    "ess_scaling": (lambda cfg: "none", "no step-size control existed: the step was eta"),
    "ess_base_ratio": (lambda cfg: 1.0, "no step-size control existed"),
    "ess_use_clipped": (lambda cfg: False, "no step-size control existed"),
    "gmc_step": (lambda cfg: False, "no step-size control existed"),
    "skip_zero_grad": (lambda cfg: False, "every update stepped the optimiser, a zero gradient included"),
    "opob_norm_by_std": (None, "only the opob advantage reads it, and it did not exist yet"),
    "opob_flat_zero": (lambda cfg: False if cfg.get("advantage") == "opob" else None,
                       ("opob gave a group of equal rewards R the advantages R (1 - sum W / (sum W + 1e-8)), not 0 "
                        "(another advantage never read it: today's default)")),
    "opob_weight": (lambda cfg: "is", "opob weighted its baseline by w^2 ||grad log pi||^2, the paper's formula"),
    "opob_std": (lambda cfg: "sample", "opob divided by the group's Bessel-corrected reward std"),
    "traj_agg": (lambda cfg: "sum", "a trajectory estimator's term was c_i A_i grad log pi(o_i), not divided by |o_i|"),
    "drift_diagnostics": (lambda cfg: False, "the drift/ columns did not exist"),
    "early_warning": (None, "no early warning existed (today's default, off): the warn/ columns were not logged"),
}
"""Config fields added after runs were made: ``{field: (value, why)}`` where ``value(cfg)`` is
what a run whose stored ``config`` lacks the field actually used, computed from that stored
config (``None``: today's default, which cannot have mattered). :func:`read_run_config`
fills these in, so an old GSPO run of ``eps = 0.2`` reads as the clip range
``[1 - 0.2, 1 + 4e-4]`` it was trained with, not today's ``[1 - 3e-4, 1 + 4e-4]``. A field
missing from a stored config and absent here is filled by nobody: it reads as missing
(``llm_runs.config.load_run_config`` then takes today's default). Every field added to the
run configuration must get an entry here (a test checks it against the committed runs), except an
estimator's knob (:func:`knob_fields`): only its estimator reads it, so a run that lacks it ran
before that estimator existed and read as today's default (:data:`KNOB_WHY`), with no entry to write."""

KNOB_WHY = "only the estimator it tunes reads it, and that estimator did not exist yet"
"""Why a run that lacks an estimator's knob field reads it as today's default."""

RENAMED_FIELDS: dict[str, str] = {
    "tis_cap": "seq_tis_bn_c", "seq_tis_cap": "seq_tis_c", "mis_low": "seq_mis_lo", "mis_high": "seq_mis_hi",
    "icepop_low": "icepop_lo", "icepop_high": "icepop_hi", "geo_low": "seq_geo_mask_lo",
    "geo_high": "seq_geo_mask_hi", "geo_length": "seq_geo_mask_length", "geo_cap": "seq_geo_mask_c",
    "dppo_delta": "dppo_tv_delta", "dppo_cap": "dppo_tv_c",
}
"""The one table of renamed config fields, ``{name stored by older runs: today's name}`` (a knob's field
is ``<estimator>_<knob>``, :func:`estimators.params.knob_field`). Every reader of a stored config, a
planned one or a ``summary.csv`` goes through :func:`renamed`, so a run stored with ``tis_cap`` is the
same run as one planned with ``seq_tis_bn_c``."""


def renamed(cfg: dict) -> dict:
    """``cfg`` (a config block or a row of settings) with its old field names (:data:`RENAMED_FIELDS`)
    written as today's; a block holding both names of one field with different values is a ValueError."""
    if RENAMED_FIELDS.keys().isdisjoint(cfg):
        return dict(cfg)
    out = {RENAMED_FIELDS.get(key, key): value for key, value in cfg.items()}
    for old, new in RENAMED_FIELDS.items():
        if old in cfg and new in cfg and cfg[old] != cfg[new]:
            raise ValueError(f"config holds {old!r} = {cfg[old]!r} and its today's name {new!r} = {cfg[new]!r}")
    return out


def knob_fields() -> dict[str, tuple[str, str]]:
    """``{config field: (estimator, knob)}`` of every estimator's knob (the records' params)."""
    from estimators.params import PARAMS, knob_field

    return {knob_field(est, p.name): (est, p.name) for est in sorted(PARAMS) for p in PARAMS[est]}


def legacy_fields(cfg: dict) -> dict[str, object]:
    """``{field: value}`` of the :data:`LEGACY_FIELDS` that ``cfg`` (a stored ``config`` block)
    lacks, with the values the run actually used (``None``: today's default applies; every knob field not
    in :data:`LEGACY_FIELDS` is one). Old field names count as today's (:func:`renamed`)."""
    cfg = renamed(cfg)
    out = {name: None for name in knob_fields() if name not in cfg}
    out.update({name: (value(cfg) if value is not None else None)
                for name, (value, _why) in LEGACY_FIELDS.items() if name not in cfg})
    return out


def read_run_doc(run: Path) -> dict:
    """The whole stored ``run/config.json`` document (settings, machine, warm start, versions), from
    the run folder or, for a run of a packed grid (:mod:`schema.packed`), from the grid's
    ``runs.jsonl.gz``. A missing run is ``FileNotFoundError``, a bad file ``ValueError`` naming it."""
    import copy

    from .packed import packed_entry

    path = Path(run) / "config.json"
    if not path.is_file():
        entry = packed_entry(run)
        if entry is not None:
            return copy.deepcopy(entry["config"])
    return read_json(path)


def read_run_summary(run: Path) -> dict | None:
    """The run's ``summary.json`` (folder or packed; None: the run has not finished)."""
    import copy

    from .packed import packed_entry

    path = Path(run) / "summary.json"
    if path.is_file():
        return read_json(path)
    entry = packed_entry(run) if not (Path(run) / "config.json").is_file() else None
    return copy.deepcopy(entry.get("summary")) if entry is not None else None


def run_finished(run: Path) -> bool:
    """Whether the run finished (wrote ``summary.json``; every packed run did)."""
    from .packed import packed_entry

    run = Path(run)
    if (run / "summary.json").is_file():
        return True
    if (run / "config.json").is_file():
        return False
    entry = packed_entry(run)
    return entry is not None and entry.get("summary") is not None


def is_packed_run(run: Path) -> bool:
    """Whether ``run`` is read from its grid's packed tables (no ``config.json`` of its own)."""
    from .packed import packed_entry

    run = Path(run)
    return not (run / "config.json").is_file() and packed_entry(run) is not None


def read_run_config(run: Path, legacy: bool = True) -> dict:
    """The ``config`` block of ``run/config.json`` (``ValueError`` naming the file if it is bad),
    from the run folder or its packed grid (:func:`read_run_doc`).

    A field stored under an older name reads under today's (:func:`renamed`). With ``legacy`` (the
    default) a field the run predates takes the value the run actually used (:data:`LEGACY_FIELDS`);
    ``legacy=False`` gives the stored values as written.
    """
    path = Path(run) / "config.json"
    j = read_json(path) if path.is_file() else read_run_doc(run)
    cfg = j.get("config", j) if isinstance(j, dict) else None
    if not isinstance(cfg, dict):
        raise ValueError(f"{path}: expected an object with a 'config' object")
    cfg = renamed(cfg)
    if legacy:
        cfg.update({k: v for k, v in legacy_fields(cfg).items() if v is not None})
    return cfg


METRICS_FILE = "metrics.csv"
"""The per-step metrics table of a run folder (written by ``llm_runs.metrics.MetricsWriter``)."""
PACKED_METRICS_FILE = METRICS_FILE + ".gz"
"""A finished run's table packed: exactly the bytes of ``metrics.csv``, gzip-compressed."""


def metrics_path(run: Path) -> Path | None:
    """The run folder's metrics table, plain or packed (None: neither). Both at once is a
    ``ValueError``: two copies of one table would be free to disagree. A run of a packed grid
    (:mod:`schema.packed`) has the path ``run/metrics.csv``, which does not exist: read it with
    :func:`metrics_text` / :func:`read_metrics_csv` (or :func:`read_run`), which find it in the pack."""
    from .packed import packed_entry

    run = Path(run)
    plain, packed = run / METRICS_FILE, run / PACKED_METRICS_FILE
    if plain.is_file() and packed.is_file():
        raise ValueError(f"{run}: both {METRICS_FILE} and {PACKED_METRICS_FILE}; keep one (they may disagree)")
    if plain.is_file():
        return plain
    if packed.is_file():
        return packed
    if not (run / "config.json").is_file() and packed_entry(run) is not None:
        return plain
    return None


def metrics_text(path: Path) -> str:
    """The text of a metrics table, plain or packed (``ValueError`` naming an unreadable file)."""
    import gzip

    path = Path(path)
    if not path.exists() and path.name == METRICS_FILE:
        from .packed import packed_grid

        pack = packed_grid(path.parent.parent)
        if pack is not None and path.parent.name in pack.entries:
            return pack.metrics_text(path.parent.name)
    if path.name.endswith(".gz"):
        try:
            with gzip.open(path, "rb") as fh:
                data = fh.read()
        except (OSError, EOFError) as exc:
            raise ValueError(f"{path}: not a readable gzip file ({exc})") from None
    else:
        data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text ({exc})") from None


def read_metrics_csv(path: Path) -> pd.DataFrame:
    """``metrics.csv`` (or its packed ``metrics.csv.gz``) parsed strictly: every line has the
    header's fields, ``step`` is an integer and every other field a number or empty; otherwise
    ``ValueError`` naming the file and line."""
    import csv
    import io

    path = Path(path)
    rows = list(csv.reader(io.StringIO(metrics_text(path), newline="")))
    if not rows:
        raise ValueError(f"{path}: empty file (no header)")
    head, body = rows[0], rows[1:]
    if not head or head[0] != "step":
        raise ValueError(f"{path}, line 1: the header must start with 'step', got {head[:3]}")
    data = []
    for i, r in enumerate(body, start=2):
        if not r:
            continue
        if len(r) != len(head):
            raise ValueError(f"{path}, line {i}: {len(r)} fields, the header has {len(head)}")
        try:
            step = int(r[0])
            vals = [float(v) if v != "" else math.nan for v in r[1:]]
        except ValueError:
            raise ValueError(f"{path}, line {i}: not a number in {','.join(r)[:120]!r}") from None
        data.append([step, *vals])
    df = pd.DataFrame(data, columns=head)
    df["step"] = df["step"].astype(int) if len(df) else df["step"]
    return df


def check_steps(m: pd.DataFrame, path: Path, steps=None) -> None:
    """Steps must be 0, 1, ..., k once each (k <= T = ``steps`` when known): ``ValueError`` otherwise."""
    st = m["step"].to_numpy()
    dup = sorted({int(x) for x in st[pd.Series(st).duplicated().to_numpy()]})
    if dup:
        raise ValueError(f"{path}: step(s) {dup[:5]} appear more than once (a corrupted run)")
    if len(st) and (sorted(st) != list(range(len(st)))):
        missing = sorted(set(range(int(max(st)) + 1)) - {int(x) for x in st})
        raise ValueError(f"{path}: steps are not 0..{int(max(st))} once each (missing {missing[:5]})")
    if steps is not None and len(st) and int(max(st)) > int(steps):
        raise ValueError(f"{path}: step {int(max(st))} beyond the run's T = {steps}")


_READ_CACHE: dict = {}
"""read_run's results in this process, keyed by the run's files and their modification times (a
report reads one study folder several times; a file written since is read again)."""


def read_run(run: Path) -> tuple[dict, pd.DataFrame]:
    """A run folder: ``(settings, metrics)``, both checked (see the module docstring). Repeated
    reads of unchanged files in one process come from a cache (copies: callers may modify them)."""
    run = Path(run)
    path = metrics_path(run)
    if path is None:
        read_run_config(run)  # a bad config.json is named first
        raise MissingResults(f"{run}: no {METRICS_FILE}")
    cfg_file = run / "config.json"
    if cfg_file.is_file():
        key = (str(run.resolve()), path.name, cfg_file.stat().st_mtime_ns, path.stat().st_mtime_ns, path.stat().st_size)
    else:  # a packed run: its grid's packed tables
        from .packed import PackedGrid

        key = (str(run.resolve()), "packed", PackedGrid.signature(run.parent))
    hit = _READ_CACHE.get(key)
    if hit is None:
        cfg = read_run_config(run)
        m = read_metrics_csv(path)
        settings = run_settings(cfg)
        check_steps(m, path, settings["steps"])
        hit = _READ_CACHE[key] = (settings, m)
    return dict(hit[0]), hit[1].copy()


def run_dirs(root: Path) -> list[Path]:
    """Every run under ``root``, sorted by name, whether it has a metrics table or not: folders
    with a ``config.json`` and the runs of its packed tables (:mod:`schema.packed`), each as the
    path ``root/name`` (a packed run's folder does not exist; read it through this module)."""
    from .packed import packed_names

    root = Path(root)
    if not root.is_dir():
        return []
    names = {p.name for p in root.iterdir() if p.is_dir() and (p / "config.json").is_file()}
    return [root / n for n in sorted(names | set(packed_names(root)))]


def run_stamp(run: Path) -> tuple:
    """What changes when the run's stored settings change: its ``config.json``'s modification time,
    or the signature of its grid's packed tables (for caches of what was read from them)."""
    run = Path(run)
    if (run / "config.json").is_file():
        return ("folder", (run / "config.json").stat().st_mtime_ns)
    from .packed import PackedGrid

    return ("packed", PackedGrid.signature(run.parent))


def run_folders(root: Path) -> list[Path]:
    """The runs directly under ``root``, sorted: folders with a ``config.json`` and a metrics
    table, plain or packed (:func:`metrics_path`), and the runs of its packed tables
    (:func:`run_dirs`). None if ``root`` is not a folder."""
    return [p for p in run_dirs(root) if metrics_path(p) is not None]
