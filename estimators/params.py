"""The knobs of every estimator with one, each defined once: name, default, symbol, range.

Each estimator declares its :class:`Param` tuple where it is registered, in its own module
(:mod:`estimators.records`); :data:`PARAMS` is the view of them by estimator name. The trainer's
config builds one field ``<estimator>_<knob>`` per knob from the same entry (so its default and ``--help`` cannot drift
from the estimator's). :func:`resolve` fills the defaults and refuses an unknown knob or a
bad value with a ``ValueError`` naming it.

Sources of the defaults (read from each method's own text or reference code):

=============  ==========  =========  ===============================================================
estimator      knob        default    source
=============  ==========  =========  ===============================================================
m2po           tau         0.04       M2PO (arXiv 2510.01161) tau_M2, "0.04 in every run";
                                      AReaL ``examples/math/gsm8k_m2po.yaml`` ``m2_threshold: 0.04``
cispo          eps_low     10.0       MiniMax-M1 (arXiv 2506.13585) eq. (4): eps_low^IS "large" (no
                                      lower bound); verl ``examples/cispo_trainer`` clip_ratio_low=10
cispo          eps_high    0.2        eps_high^IS; the paper tunes it without printing a value; verl's
                                      reference CISPO run uses clip_ratio_high=0.2 (ScaleRL instead
                                      caps the ratio at 5, i.e. eps_high = 4)
opsm           delta       0.5        DeepSeek-V3.2 (arXiv 2512.02556) eq. (9) names delta without a
                                      value; TRL ``off_policy_mask_threshold`` documents 0.5
gspo           eps_low     3e-4       GSPO (arXiv 2507.18071) §5.1: left clip 3e-4
gspo           eps_high    4e-4       GSPO §5.1: right clip 4e-4
seq_tis        C           2.0        verl ``rollout_is_threshold`` default (rollout_corr_helper.py); VCPO
                                      (mit-han-lab/vcpo ``recipe/fully_async_policy/shell/vcpo``) sets 8.0
seq_tis_bn     C           2.0        verl ``rollout_is_threshold`` default (rollout_corr_helper.py)
seq_mis        lo          0.5        verl ``decoupled_seq_is_rs`` rs_threshold "0.5_2.0" (seq_sum_k1)
seq_mis        hi          2.0        same
gmc_cap        kappa       1.0        this toolkit (estimators.variants): C = 1+eps, the TIC-trunc level
icepop         lo, hi      0.5, 5.0   verl ``RolloutCorrectionConfig.bypass_pg_token_icepop`` (threshold_lower 0.5,
                                      threshold 5.0; IcePop's alpha, beta)
seq_geo_mask   lo, hi      0.999,     verl Geo-RS presets, rs_threshold "0.999_1.001"
                           1.001
seq_geo_mask   length      1          tokens per completion the geometric mean averages over (not in verl:
                                      a trajectory scheme does not see lengths; E1: 1)
seq_geo_mask   C           0          0: no IS weight (``bypass_pg_geo_rs``); verl's seq-TIS variant uses 2.0
sapo           tau_pos     1.0        verl ``ActorConfig.tau_pos``; TRL ``sapo_temperature_pos``
sapo           tau_neg     1.05       verl ``ActorConfig.tau_neg``; TRL ``sapo_temperature_neg``
vespo          k_pos, ...  2, 3,      TRL ``vespo_k_pos`` 2, ``vespo_lambda_pos`` 3, ``vespo_k_neg`` 3,
                           3, 2       ``vespo_lambda_neg`` 2 (grpo_config.py)
dppo_tv        delta       0.15       verl ``examples/dppo_trainer/run_qwen3_30b_a3b_megatron.sh``
                                      (dppo_tv: clip_ratio_low = high = 0.15; prime-rl: 0.2)
dppo_tv        C           1e4        same script, ``clip_ratio_c=10000.0`` (the truncation of the ratio)
ctpo           delta       0.2        this toolkit's choice (CTPO's code was not available to read)
trm_k2/k3      delta       0.05       this toolkit's choice (verl's seq_max_k2/k3 take a threshold, no default)
dispo          pos_low..   0.2, 0.28, this toolkit's reading: DAPO's clip-higher (0.2 / 0.28) for correct
                           0.2, 0.2   responses, symmetric 0.2 for incorrect ones (DISPO's code not read)
oapl           beta        1.0        this toolkit's choice (OAPL's release was not available to read)
=============  ==========  =========  ===============================================================

(verl: verl-project/verl at 1dda039b9c6311889a9c9a26040677e1254814f9; TRL: huggingface/trl at
f2cd57710ae345ea6428ae95363267fcf38a3dc8; prime-rl: PrimeIntellect-ai/prime-rl at
559b44772e471d1538537b8805cc77f3824a5e64.)
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from numbers import Real
from typing import Any


@dataclass(frozen=True)
class Param:
    """One knob: ``lo``/``hi`` bound the value (``lo_open``/``hi_open``: strict)."""

    name: str
    default: float
    symbol: str
    doc: str
    lo: float = 0.0
    hi: float = math.inf
    lo_open: bool = True
    hi_open: bool = True
    batch_length: bool = False  # a completion length: the adapters (verl, TRL) take it from the batch when not given

    def check(self, value: Any, owner: str) -> float:
        if isinstance(value, bool) or not isinstance(value, Real):
            raise ValueError(f"{owner}: {self.name} ({self.symbol}) must be a real number, got {value!r}")
        v = float(value)
        lo_ok = v > self.lo if self.lo_open else v >= self.lo
        hi_ok = v < self.hi if self.hi_open else v <= self.hi
        if not (math.isfinite(v) and lo_ok and hi_ok):
            lo_b = "(" if self.lo_open else "["
            hi_b = ")" if self.hi_open else "]"
            raise ValueError(f"{owner}: {self.name} ({self.symbol}) must be a finite number in "
                             f"{lo_b}{self.lo:g}, {self.hi:g}{hi_b}, got {value!r}")
        return v


PARAMS: dict[str, tuple[Param, ...]] = {}
"""Knobs per estimator name (trajectory schemes and token-level losses alike): filled by each estimator's
registration in its own module (:func:`estimators.records.record`), never written here."""

KNOB_CHECKS: dict[str, Any] = {}
"""estimator name -> its check across knobs (``lo <= hi``), run by :func:`resolve` after each knob's
range; filled like :data:`PARAMS`, from the estimator's record."""


def knob_field(estimator: str, param: str) -> str:
    """The trainer's config field (and, ``_`` written ``-``, its flag) of knob ``param`` of ``estimator``:
    ``<estimator>_<knob>`` in lower case (``seq_geo_mask`` ``C``: ``seq_geo_mask_c``, ``--seq-geo-mask-c``)."""
    return f"{estimator}_{param}".lower()


def params_of(estimator: str) -> tuple[Param, ...]:
    return PARAMS.get(estimator, ())


def defaults(estimator: str) -> dict[str, float]:
    return {p.name: p.default for p in params_of(estimator)}


def resolve(estimator: str, given: dict | None) -> dict[str, float]:
    """Defaults of ``estimator``'s knobs updated by ``given``; every value checked."""
    specs = {p.name: p for p in params_of(estimator)}
    if given is not None and not isinstance(given, Mapping):
        raise ValueError(f"{estimator!r}: options must be a mapping of knob name to value, got {type(given).__name__}")
    given = dict(given or {})
    unknown = sorted(set(given) - set(specs))
    if unknown:
        valid = ", ".join(specs) if specs else "none"
        raise ValueError(f"{estimator!r} takes no option(s) {unknown}; its options: {valid}")
    out = {k: p.check(given.get(k, p.default), repr(estimator)) for k, p in specs.items()}
    check = KNOB_CHECKS.get(estimator)
    if check is not None:
        try:
            check(out)
        except ValueError as exc:
            raise ValueError(f"{estimator!r}: {exc}") from None
    return out
