"""Published stale-rollout corrections as peers: the papers' defaults and the config's fields for every
knob, bad knobs refused, the exact membership rule and its counterexamples."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from estimators import PARAMS, SCHEMES, weights
from estimators.losses import check_options, loss_names
from llm_runs.config import TrainConfig, config_fields

# ----------------------------------------------------------------- defaults, knobs, membership


PAPER_DEFAULTS = {"m2po": {"tau": 0.04}, "cispo": {"eps_low": 10.0, "eps_high": 0.2}, "opsm": {"delta": 0.5},
                  "gspo": {"eps_low": 3e-4, "eps_high": 4e-4}, "seq_tis": {"C": 2.0}, "seq_tis_bn": {"C": 2.0},
                  "seq_mis": {"lo": 0.5, "hi": 2.0}, "icepop": {"lo": 0.5, "hi": 5.0},
                  "seq_geo_mask": {"lo": 0.999, "hi": 1.001, "length": 1.0, "C": 0.0},
                  "sapo": {"tau_pos": 1.0, "tau_neg": 1.05},
                  "vespo": {"k_pos": 2.0, "lambda_pos": 3.0, "k_neg": 3.0, "lambda_neg": 2.0},
                  "dppo_tv": {"delta": 0.15, "C": 1e4}, "gmc_cap": {"kappa": 1.0},
                  "ctpo": {"delta": 0.2}, "trm_k2": {"delta": 0.05}, "trm_k3": {"delta": 0.05},
                  "dispo": {"pos_low": 0.2, "pos_high": 0.28, "neg_low": 0.2, "neg_high": 0.2}, "oapl": {"beta": 1.0}}
"""The shipped estimators' knobs and their defaults (the sources: :mod:`estimators.params`' table)."""
KNOBLESS = ("is", "stale", "tic_mask", "tic_trunc", "tic_ppo", "gmc", "snis", "topr", "gmc_topr", "topr_gmc",
            "token_clip", "p3o", "minpro")
"""The shipped estimators with no knob."""
EPS_HIGH_TAKERS = ("token_clip", "opsm", "minpro", "trm_k2", "trm_k3")
"""The shipped token losses that take the run's ``eps_high`` (an option beyond their knobs)."""


def test_paper_defaults_and_config_fields():
    d = {name: {p.name: p.default for p in ps} for name, ps in PARAMS.items()}
    assert {n: d.get(n) for n in PAPER_DEFAULTS} == PAPER_DEFAULTS
    assert set(KNOBLESS) <= set(loss_names()) and not set(KNOBLESS) & set(d)
    knobs = {f.metadata["knob"]: f for f in config_fields() if "knob" in f.metadata}
    assert set(knobs) == {(n, p.name) for n, ps in PARAMS.items() for p in ps}  # every knob has a field
    cfg = TrainConfig()
    for (name, param), f in knobs.items():  # every registered knob: its record's default, checked, with a symbol
        spec = next(p for p in PARAMS[name] if p.name == param)
        assert getattr(cfg, f.name) == d[name][param] == spec.check(spec.default, name) and f.metadata["symbol"]
    from llm_runs.train import build_parser, field_flag

    text = build_parser().format_help()
    for f in knobs.values():
        assert field_flag(f) in text and f"[{f.metadata['symbol']}]" in text
    assert dataclasses.replace(cfg, estimator="seq_mis", seq_mis_hi=3.0).loss_options() == {"lo": 0.5, "hi": 3.0}
    assert dataclasses.replace(cfg, estimator="gspo").loss_options() == {"eps_low": 3e-4, "eps_high": 4e-4}
    assert dataclasses.replace(cfg, estimator="opsm", eps_high=0.28).loss_options() == {"delta": 0.5, "eps_high": 0.28}
    assert dataclasses.replace(cfg, estimator="gmc").loss_options() == {}
    takers = []
    for name in loss_names():  # every registered loss: the config hands it only options it takes
        options = dataclasses.replace(cfg, estimator=name, eps_high=0.28).loss_options()
        assert check_options(name, options) == options, name
        assert set(d.get(name, {})) <= set(options) <= set(d.get(name, {})) | {"eps_high"}, name
        if options.get("eps_high") == 0.28:
            takers.append(name)
    shipped = set(PAPER_DEFAULTS) | set(KNOBLESS)
    assert set(takers) & shipped == set(EPS_HIGH_TAKERS)


@pytest.mark.parametrize("call, match", [
    (lambda: weights("seq_mis", np.zeros((1, 2)), 0.2, lo=3.0, hi=2.0), "needs lo < hi"),
    (lambda: weights("seq_mis", np.zeros((1, 2)), 0.2, lo=-0.1), r"lo \(w_lo\) must be a finite number in \[0"),
    (lambda: weights("seq_tis_bn", np.zeros((1, 2)), 0.2, C=0.0), r"C \(C\) must be a finite number in \(0"),
    (lambda: weights("seq_tis_bn", np.zeros((1, 2)), 0.2, C=float("inf")), "C .* got inf"),
    (lambda: weights("gmc", np.zeros((1, 2)), 0.2, C=2.0), r"'gmc' takes no option\(s\) \['C'\]"),
    (lambda: check_options("m2po", {"tau": -1.0}), r"tau \(tau_M2\) must be a finite number in \(0"),
    (lambda: check_options("cispo", {"eps_high": float("nan")}), "eps_high .* got nan"),
    (lambda: check_options("opsm", {"delta": "0.5"}), "must be a real number"),
    (lambda: check_options("gspo", {"eps_low": 1.5}), r"eps_low .* in \(0, 1\)"),
    (lambda: check_options("m2po", {"eps_high": 0.2}), r"'m2po' takes no option\(s\) \['eps_high'\]"),
])
def test_bad_knobs_refused(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_bad_knobs_refused_by_the_config():
    with pytest.raises(ValueError, match=r"tau .* got 0.0 \(config fields m2po_tau\)"):
        TrainConfig(m2po_tau=0.0).validate()
    with pytest.raises(ValueError, match="needs lo < hi"):
        TrainConfig(seq_mis_lo=2.0, seq_mis_hi=2.0).validate()
    with pytest.raises(ValueError, match="micro_batch_groups must be 0"):
        TrainConfig(estimator="m2po", micro_batch_groups=2).validate()
    with pytest.raises(ValueError, match="micro_batch_groups must be 0"):
        TrainConfig(estimator="seq_tis_bn", micro_batch_groups=2).validate()


def test_exact_membership_rule_and_counterexamples():
    eps = 0.2
    member = {n: s.member(eps) for n, s in SCHEMES.items()}
    assert member["topr"] and member["seq_tis_bn"] and not member["seq_mis"]  # one group per batch
    tis_bn = SCHEMES["seq_tis_bn"]
    assert not tis_bn.member(eps, prompts_per_step=2) and tis_bn.member(1.0, prompts_per_step=2)
    assert SCHEMES["seq_mis"].member(eps, hi=1.2) and not SCHEMES["seq_mis"].member(eps, hi=1.2 + 1e-12)
    for n, s in SCHEMES.items():  # the in_class flag is the rule at the defaults for every eps and batch
        assert s.in_class == all(s.member(e, B) for e in (1e-3, 0.2, 5.0) for B in (1, 2, 8)), n
    # the suprema are attained or approached: seq_mis at w = hi, seq_tis_bn as the other groups vanish
    assert weights("seq_mis", np.log([[2.0, 2.0]]), eps).mean() == 2.0 > 1 + eps
    lr = np.array([[0.0, 0.0], [-40.0, -40.0]])
    assert weights("seq_tis_bn", lr, eps)[0].mean() == pytest.approx(2.0, rel=1e-12)
