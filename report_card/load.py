"""Load a correction from a file outside the package, and refuse a bad one before any work starts.

A correction file registers one trajectory scheme (:func:`estimators.register_scheme`) or one
token-level loss (:func:`estimators.losses.register_token_loss`), its knobs in
:data:`estimators.params.PARAMS` (README, "Add a correction in three steps"). :func:`load_correction` imports
it, finds what it registered, and :func:`validate` evaluates the new correction on a small battery
of ratio vectors (a scheme) or batches (a token loss). Every problem is one
:class:`CorrectionError` naming what is wrong; nothing the file registered stays registered
after a refusal.
"""
from __future__ import annotations

import hashlib
import importlib.util
import itertools
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import estimators
from estimators.losses import TOKEN_LOSSES
from estimators.records import RECORDS, forget

EPS = 0.2
"""The threshold every part of the card uses (the study's, the sweeps')."""


class CorrectionError(ValueError):
    """A correction file or registered correction that the card refuses, with what is wrong."""


@dataclass
class Correction:
    """A registered correction the card is made for."""

    name: str
    level: str  # "trajectory" or "token"
    source: str  # the file it came from, or "registered" (shipped with the toolkit)
    digest: str  # sha256 of the file's bytes (or of the toolkit's registration's code), keys resumable parts
    validation: list = field(default_factory=list)  # battery rows (:func:`validate`)

    @property
    def is_new(self) -> bool:
        """True for a correction the toolkit does not ship (its committed results hold nothing of it)."""
        return self.source != "registered"


_LOADED: dict[str, list[str]] = {}
"""Correction files already imported in this process (resolved path -> the names they registered)."""


def _registered() -> tuple[set, set, set]:
    return set(estimators.SCHEMES), set(TOKEN_LOSSES), set(RECORDS)


def _roll_back(before: tuple[set, set, set]) -> None:
    schemes, losses, records = before
    for n in set(estimators.SCHEMES) - schemes:
        del estimators.SCHEMES[n]
    for n in set(TOKEN_LOSSES) - losses:
        del TOKEN_LOSSES[n]
    for n in set(RECORDS) - records:
        forget(n)  # the record and its views (knobs, knob checks)


def load_correction(path: str | Path, estimator: str | None = None) -> Correction:
    """Import the correction file ``path`` and return what it registered (``estimator`` picks one when it
    registers several). :class:`CorrectionError` when the file does not exist or fails to import,
    registers nothing, registers a name the toolkit already has, or registers several without
    ``name``."""
    p = Path(path).expanduser().resolve()
    if not p.is_file() and p.suffix != ".py" and p.with_name(p.name + ".py").is_file():
        p = p.with_name(p.name + ".py")  # a module path given without its .py
    if not p.is_file():
        raise CorrectionError(f"correction file {path} does not exist" + (" (it is a folder)" if p.is_dir() else ""))
    digest = hashlib.sha256(p.read_bytes()).hexdigest()
    key = str(p)
    if key in _LOADED:
        names = _LOADED[key]
    else:
        before = _registered()
        mod_name = "report_card_correction_" + hashlib.sha1(key.encode()).hexdigest()[:12]
        from importlib.machinery import SourceFileLoader

        # a Python source file whatever its suffix (spec_from_file_location knows .py only)
        spec = importlib.util.spec_from_file_location(mod_name, p, loader=SourceFileLoader(mod_name, str(p)))
        module = importlib.util.module_from_spec(spec)
        sys.modules[mod_name] = module
        try:
            spec.loader.exec_module(module)
        except ValueError as exc:
            _roll_back(before)
            sys.modules.pop(mod_name, None)
            what = "a name clash" if "already registered" in str(exc) else "a refused registration"
            raise CorrectionError(f"{p.name}: {what}: {exc}") from None
        except (Exception, SystemExit) as exc:  # noqa: BLE001 (the user's file: any failure or exit is its error)
            _roll_back(before)
            sys.modules.pop(mod_name, None)
            raise CorrectionError(f"{p.name} failed to import: {type(exc).__name__}: {exc}") from None
        schemes, losses, _ = before
        new_s = sorted(set(estimators.SCHEMES) - schemes)
        new_l = sorted(set(TOKEN_LOSSES) - losses)
        clash = sorted(set(new_s) & losses) + sorted(set(new_l) & schemes)
        if clash:
            _roll_back(before)
            sys.modules.pop(mod_name, None)
            raise CorrectionError(f"{p.name}: a name clash: {clash} is already registered as a "
                                  f"{'token-level loss' if set(new_s) & losses else 'trajectory scheme'}")
        names = new_s + new_l
        if not names:
            _roll_back(before)
            sys.modules.pop(mod_name, None)
            raise CorrectionError(f"{p.name} registers no correction: decorate a function with "
                                  f"estimators.register_scheme(...) or estimators.losses.register_token_loss(...) "
                                  f"(the README's 'Add a correction in three steps')")
        _LOADED[key] = names
    if estimator is None and len(names) > 1:
        raise CorrectionError(f"{p.name} registers {len(names)} corrections ({', '.join(names)}): pick one with "
                              f"--estimator")
    chosen = estimator or names[0]
    if chosen not in names:
        raise CorrectionError(f"{p.name} registers {', '.join(names)}, not {chosen!r}")
    level = "trajectory" if chosen in estimators.SCHEMES else "token"
    return Correction(chosen, level, str(p), digest)


def unload(path: str | Path) -> None:
    """Remove what the correction file ``path`` registered in this process (a test's clean-up)."""
    key = str(Path(path).expanduser().resolve())
    for n in _LOADED.pop(key, []):
        estimators.SCHEMES.pop(n, None)
        TOKEN_LOSSES.pop(n, None)
        forget(n)


def card_folder(cards: Path, name: str) -> Path:
    """The folder of ``name``'s card under ``cards`` (``--out``): a name with path parts (``/``, ``..``,
    an absolute path) is a :class:`CorrectionError`, so nothing is written outside ``cards``."""
    import re

    from estimators.schemes import NAME_PATTERN

    folder = Path(cards) / str(name)
    inside = Path(cards).resolve() in folder.resolve().parents
    if not isinstance(name, str) or not re.fullmatch(NAME_PATTERN, name) or name in (".", "..") or not inside:
        raise CorrectionError(f"correction name {name!r} is not a plain name (letters, digits, '_', '.', '-'): its "
                              f"card would be written outside {cards}")
    return folder


def registered_correction(estimator: str) -> Correction:
    """A correction the toolkit ships (``--estimator``); :class:`CorrectionError` for an unknown name."""
    import inspect

    if estimator in estimators.SCHEMES:
        fn, level = estimators.SCHEMES[estimator].log_weights, "trajectory"
    elif estimator in TOKEN_LOSSES:
        fn, level = TOKEN_LOSSES[estimator].fn, "token"
    else:
        valid = ", ".join(list(estimators.SCHEMES) + list(TOKEN_LOSSES))
        raise CorrectionError(f"no registered correction named {estimator!r}; registered: {valid}")
    try:
        code = inspect.getsource(fn)
    except (OSError, TypeError):
        code = estimator
    return Correction(estimator, level, "registered", hashlib.sha256(code.encode()).hexdigest())


# --------------------------------------------------------------------------- the battery

BATTERY_LOG_RATIOS = (0.0, 1e-6, -1e-6, 0.1, -0.1, math.log(1.2), 1.0, -1.0, 5.0, -5.0, 30.0, -30.0, 700.0, -700.0)
"""Trajectory log-ratios of the validation battery: the on-policy point, small and moderate
drifts, the cap's edge log(1+eps), and ratios that overflow float32 and nearly float64."""


BATTERY_G = (4, 2, 3, 8, 16)
"""The group sizes of the battery: G = 4 first (with batches of one group, and one group of 2), then every G the
card itself uses (E1 and the LLM cells at 8, claim 2's search at 3, the study's batch of 16 groups) and 16."""


def _scheme_cases(G: int = 4):
    """(log-ratio array (prompts_per_step, G), advantages or None) pairs of the battery."""
    vals = np.array(BATTERY_LOG_RATIOS)
    rng = np.random.default_rng(20261203)
    arrays = [np.tile(vals[:, None], (1, G)),  # every trajectory of a group at one value
              np.stack([np.roll(np.resize(vals, G), k) for k in range(len(vals))]),  # mixed groups
              rng.normal(0.0, 2.0, size=(16, G))]
    signs = [np.ones(G), -np.ones(G), np.resize([1.0, -1.0], G), np.zeros(G)]
    for lr in arrays:
        for s in signs:
            yield lr, np.broadcast_to(s, lr.shape).copy()
    if G != BATTERY_G[0]:
        return
    for k, src in itertools.product(range(len(vals)), arrays[:2]):  # small batches: one group, one group of 2
        for s in signs[:3]:
            one = src[k:k + 1]
            yield one.copy(), np.broadcast_to(s, one.shape).copy()
            yield one[:, :2].copy(), np.broadcast_to(s[:2], (1, 2)).copy()


def _first_changed(before: np.ndarray, after: np.ndarray) -> str:
    g = int(np.argwhere(~((before == after) | (np.isnan(before) & np.isnan(after))))[0][0])
    return f"{np.round(before[g], 6).tolist()} became {np.round(np.asarray(after)[g], 6).tolist()}"


def _failing_group(estimator: str, lr: np.ndarray, adv, eps: float, kind: str = "numpy") -> str:
    """The battery batch a scheme raised on, named by its first group that raises alone (or the batch)."""
    import torch

    what = f"a batch of {lr.shape[0]} group(s) of G = {lr.shape[1]}"
    if lr.shape[0] == 1:
        return f"{what}: group log-ratios {np.round(lr[0], 6).tolist()}"
    as_kind = (lambda x: x.copy()) if kind == "numpy" else (lambda x: torch.tensor(x, dtype=torch.float64))
    for g in range(lr.shape[0]):
        try:
            estimators.weights(estimator, as_kind(lr[g:g + 1]), eps, None if adv is None else as_kind(adv[g:g + 1]))
        except (Exception, SystemExit):  # noqa: BLE001
            return f"group log-ratios {np.round(lr[g], 6).tolist()} (alone, as a batch of one group)"
    return f"{what} (no group raises alone; first group {np.round(lr[0], 6).tolist()})"


def _first_bad(mask: np.ndarray, lr: np.ndarray, adv) -> str:
    g, i = (int(v) for v in np.argwhere(mask)[0])
    a = "" if adv is None else f", advantages {adv[g].tolist()}"
    return f"group log-ratios {np.round(lr[g], 6).tolist()}{a} (G = {lr.shape[1]}, completion {i})"


def validate(corr: Correction, eps: float = EPS) -> list[dict]:
    """Evaluate ``corr`` on the battery; the rows of what was checked. :class:`CorrectionError` at the
    first wrong shape, exception, NaN or negative weight (a scheme) or wrong output, NaN value or
    gradient (a token loss)."""
    rows = _validate_scheme(corr.name, eps) if corr.level == "trajectory" else _validate_token(corr.name, eps)
    corr.validation = rows
    return rows


def _validate_scheme(estimator: str, eps: float) -> list[dict]:
    import torch

    spec = estimators.get_scheme(estimator)
    n = 0
    for (lr_np, adv), kind in itertools.product((case for G in BATTERY_G for case in _scheme_cases(G)),
                                                ("numpy", "torch")):
        # numpy arrays and float64 torch tensors (policy_loss's), each compared with its copy after the call
        lr = lr_np.copy() if kind == "numpy" else torch.tensor(lr_np, dtype=torch.float64)
        a = None if not spec.needs_advantages else adv.copy() if kind == "numpy" else torch.tensor(adv)
        lr_in, a_in = lr_np.copy(), None if a is None else adv.copy()
        try:
            c = estimators.weights(estimator, lr, eps, a)
        except (Exception, SystemExit) as exc:  # noqa: BLE001 (the correction's own failure, named)
            on = "" if kind == "numpy" else " float64 torch tensors (as policy_loss passes them):"
            raise CorrectionError(f"scheme {estimator!r} raises {type(exc).__name__} on{on} "
                                  f"{_failing_group(estimator, lr_in, a_in, eps, kind)}: {exc}") from None
        for what, before, after in (("log-ratios", lr_in, lr), ("advantages", a_in, a)):
            after = np.asarray(after) if kind == "numpy" or after is None else after.numpy()
            if before is not None and not np.array_equal(before, after, equal_nan=True):
                raise CorrectionError(f"scheme {estimator!r} writes into the {what} it is given ({kind}: group "
                                      f"{_first_changed(before, after)}, G = {lr_in.shape[1]}): a correction must "
                                      f"not change its inputs")
        c = np.asarray(c.detach() if isinstance(c, torch.Tensor) else c)
        lr, a = lr_in, a_in
        if c.shape != lr.shape:
            raise CorrectionError(f"scheme {estimator!r} returns weights of shape {c.shape} for log-ratios of shape "
                                  f"{lr.shape}: a scheme maps (prompts_per_step, G) to (prompts_per_step, G)")
        if np.isnan(c).any():
            raise CorrectionError(f"scheme {estimator!r} gives a NaN weight for {_first_bad(np.isnan(c), lr, a)}")
        if (c < 0).any():
            raise CorrectionError(f"scheme {estimator!r} gives a negative weight ({float(c[c < 0][0]):g}) for "
                                  f"{_first_bad(c < 0, lr, a)}: a weight c_i is >= 0")
        if spec.bounded and np.isinf(c).any():
            raise CorrectionError(f"scheme {estimator!r} is declared bounded but gives an infinite weight for "
                                  f"{_first_bad(np.isinf(c), lr, a)}")
        n += lr.size
    try:  # the declared supremum must be a number
        sup = spec.group_mass_sup(eps, 1)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 (the correction's own failure, named)
        raise CorrectionError(f"scheme {estimator!r}: its sup_mass(eps, prompts_per_step, **knobs) fails: "
                              f"{type(exc).__name__}: {exc}") from None
    if math.isnan(sup):
        raise CorrectionError(f"scheme {estimator!r}: its declared supremum of a group's mass is NaN")
    return [{"check": f"weights on the battery (numpy and float64 torch, G = {', '.join(map(str, BATTERY_G))})",
             "evaluated": n, "result": "finite, >= 0, right shape, inputs unchanged"},
            {"check": "declared sup of a group's mass (eps = 0.2, one group)", "evaluated": 1, "result": f"{sup:g}"}]


def _token_batches(G: int = 4, T: int = 3):
    """(logp, old_logp, mask, advantages) float64 batches of the battery: per-token log-ratios from
    :data:`BATTERY_LOG_RATIOS` (clipped at +-30: log-probs stay <= 0), two groups."""
    import torch

    vals = [v for v in BATTERY_LOG_RATIOS if abs(v) <= 30.0]
    old = torch.full((2 * G, T), -40.0, dtype=torch.float64)  # room for log-ratios up to +30 below 0
    mask = torch.ones(2 * G, T, dtype=torch.float64)
    mask[1, 1:] = 0
    for v, adv_sign in itertools.product(vals, (1.0, -1.0)):
        logp = old + v
        logp[:, 0] = old[:, 0] + torch.linspace(-1.0, 1.0, 2 * G, dtype=torch.float64)
        adv = torch.tensor([adv_sign, -adv_sign] * G, dtype=torch.float64)
        yield logp, old, mask, adv


def _validate_token(estimator: str, eps: float) -> list[dict]:
    import torch

    from estimators.losses import LossOutput, check_options

    n = 0
    bounded = TOKEN_LOSSES[estimator].bounded
    for G, (logp, old, mask, adv) in ((g, b) for g in BATTERY_G for b in _token_batches(g)):
        x = logp.clone().requires_grad_()
        what = f"G = {G}, per-token log-ratio {float((logp - old)[0, 1]):g}, advantages {adv[:2].tolist()}..."
        given = {"logp": (x, logp.clone()), "old_logp": (old, old.clone()), "mask": (mask, mask.clone()),
                 "advantages": (adv, adv.clone())}
        try:  # the registered function itself, as policy_loss dispatches to it (float64: nothing to widen)
            out = TOKEN_LOSSES[estimator].fn(x, old, mask, adv, G, eps, **check_options(estimator, {}))
        except (Exception, SystemExit) as exc:  # noqa: BLE001 (the correction's own failure, named)
            raise CorrectionError(f"token loss {estimator!r} raises {type(exc).__name__} at {what}: {exc}") from None
        for name, (now, before) in given.items():
            if not torch.equal(now.detach(), before):
                raise CorrectionError(f"token loss {estimator!r} writes into the {name} it is given (at {what}): a "
                                      f"correction must not change its inputs")
        if not isinstance(out, LossOutput):
            raise CorrectionError(f"token loss {estimator!r} returns {type(out).__name__}, not "
                                  f"estimators.losses.LossOutput")
        if not isinstance(out.loss, torch.Tensor) or out.loss.shape != ():
            shape = tuple(out.loss.shape) if isinstance(out.loss, torch.Tensor) else type(out.loss).__name__
            raise CorrectionError(f"token loss {estimator!r} returns a loss of shape {shape}: it must be a scalar "
                                  f"tensor")
        if tuple(out.seq_log_ratio.shape) != (2, G):
            raise CorrectionError(f"token loss {estimator!r} returns seq_log_ratio of shape "
                                  f"{tuple(out.seq_log_ratio.shape)}: it must be (prompts_per_step, G) = (2, {G})")
        if bool(torch.isnan(out.loss)):
            raise CorrectionError(f"token loss {estimator!r} gives a NaN loss at {what}")
        if bounded and not bool(torch.isfinite(out.loss)):
            raise CorrectionError(f"token loss {estimator!r} is declared bounded but gives a {float(out.loss):g} loss "
                                  f"at {what}: declare it bounded=False, or keep it finite")
        if out.loss.requires_grad:
            out.loss.backward()
            if x.grad is not None and bool(torch.isnan(x.grad).any()):
                raise CorrectionError(f"token loss {estimator!r} gives a NaN gradient at {what}")
            if bounded and x.grad is not None and not bool(torch.isfinite(x.grad).all()):
                raise CorrectionError(f"token loss {estimator!r} is declared bounded but gives an infinite gradient "
                                      f"at {what}")
        n += 1
    return [{"check": f"loss and gradient on the battery (float64, G = {', '.join(map(str, BATTERY_G))})",
             "evaluated": n, "result": "scalar, not NaN, finite if declared bounded, seq_log_ratio (prompts_per_step, "
                                       "G), inputs unchanged"}]
