"""Step-size control settings in the run's config (llm_runs.config): bad values refused by name, settings
whose steps must blow up refused up front, VCPO's settings refused where they have no meaning, and a
setting that cannot act under the others refused naming both."""
from __future__ import annotations

import pytest
from conftest import tiny

from llm_runs import stepsize


@pytest.mark.parametrize("field, value, match", [
    ("ess_scaling", "cubic", "unknown ess_scaling 'cubic'"),
    ("ess_base_ratio", 0.0, "ess_base_ratio must be in"),
    ("gmc_step", "yes", "gmc_step must be true or false"),
    ("advantage", "opob2", "unknown advantage 'opob2'"),
    ("opob_weight", "w4", "unknown opob_weight 'w4'"),
    ("opob_std", "bessel", "unknown opob_std 'bessel'"),
    ("traj_agg", "mean", "unknown traj_agg 'mean'"),
])
def test_bad_step_controls_are_refused_by_name(tmp_path, field, value, match):
    with pytest.raises(ValueError, match=match):
        tiny(tmp_path, **{field: value}).validate()


def test_clipped_ess_needs_trajectory_weights(tmp_path):
    with pytest.raises(ValueError, match="token-level loss"):
        tiny(tmp_path, estimator="gspo", ess_scaling="sqrt", ess_use_clipped=True).validate()


def test_the_vcpo_recipe_names_only_real_settings():
    from llm_runs.config import TrainConfig

    fields = set(TrainConfig.__dataclass_fields__)
    assert set(stepsize.RECIPES["vcpo"]) <= fields


def test_settings_whose_steps_must_blow_up_are_refused_up_front(tmp_path):
    from llm_runs.train import main

    with pytest.raises(ValueError, match=r"1 - lr \* weight_decay = -99999.*no decay"):
        tiny(tmp_path, optimizer="adamw", lr=0.1, weight_decay=1e6).validate()
    with pytest.raises(ValueError, match="cannot step float16 weights"):
        tiny(tmp_path, dtype="float16").validate()
    tiny(tmp_path, dtype="float16", optimizer="sgd").validate()  # SGD's step needs no eps
    assert main(["--out", str(tmp_path / "run2"), "--no-progress", "--dtype", "float16", "--steps", "1",
                 "--cache-dir", str(tmp_path / "cache")]) == 2


@pytest.mark.parametrize("kw, match", [
    ({"estimator": "topr", "advantage": "opob", "opob_weight": "vcpo"}, "estimator 'topr' has none"),
    ({"estimator": "token_clip", "advantage": "opob", "opob_weight": "vcpo"}, "estimator 'token_clip' has none"),
    ({"estimator": "token_clip", "traj_agg": "token-mean"}, "token-level loss with its own aggregation"),
])
def test_vcpo_s_settings_are_refused_where_they_have_no_meaning(tmp_path, kw, match):
    with pytest.raises(ValueError, match=match):
        tiny(tmp_path, **kw).validate()
    assert tiny(tmp_path, estimator="gmc", advantage="opob", opob_weight="vcpo", traj_agg="token-mean").validate()


# --- a step-control or OPOB setting that cannot act under the other settings is refused, naming both ----------

INERT_VALUES = {"ess_base_ratio": 0.5, "ess_use_clipped": True, "opob_norm_by_std": False, "opob_flat_zero": False,
                "opob_weight": "vcpo", "opob_std": "population"}
"""A value other than the default for each setting of :data:`llm_runs.stepsize.ACTS_ONLY_WITH`."""
WHERE_IT_ACTS = {"ess_scaling": {"ess_scaling": "sqrt"}, "advantage": {"advantage": "opob"}}


@pytest.mark.parametrize("setting", [row[0] for row in stepsize.ACTS_ONLY_WITH])
def test_a_setting_that_cannot_act_is_refused_naming_both(tmp_path, setting):
    """Each setting that acts only under others (ESS scaling's base and clipped weights, every OPOB setting) is
    refused by the run's config, naming it and the setting that decides, where it would change nothing
    (``vcpo_exact``'s OPOB settings with ``advantage = 'loo'``), and by a :class:`StepControl` (which has no
    advantage mode); the same value is accepted where it acts."""
    assert set(INERT_VALUES) == {row[0] for row in stepsize.ACTS_ONLY_WITH}  # a new entry needs a value here
    _, default, _, deciders, _ = next(r for r in stepsize.ACTS_ONLY_WITH if r[0] == setting)
    value = INERT_VALUES[setting]
    assert value != default
    for base in ({}, {"estimator": "seq_tis", "advantage": "loo", "ess_scaling": "none"}):
        with pytest.raises(ValueError, match=rf"{setting} = {value!r} cannot act with {deciders[0]} = "):
            tiny(tmp_path, **{"estimator": "gmc", **base, setting: value})
        if setting.startswith("opob") or base:
            continue
        with pytest.raises(ValueError, match=rf"{setting} = {value!r} cannot act"):
            stepsize.StepControl(**{setting: value})
    acting = {k: v for d in deciders if d in WHERE_IT_ACTS for k, v in WHERE_IT_ACTS[d].items()}
    assert getattr(tiny(tmp_path, estimator="gmc", **acting, **{setting: value}), setting) == value
    if setting.startswith("ess"):
        assert getattr(stepsize.StepControl(**acting, **{setting: value}), setting) == value


def test_vcpo_exact_with_another_advantage_is_refused():
    """The case found: ``vcpo_exact``'s OPOB settings with ``advantage = 'loo'``, where they change nothing."""
    from llm_runs.config import TrainConfig

    with pytest.raises(ValueError, match=r"opob_.* cannot act with advantage = 'loo'"):
        TrainConfig(**{**stepsize.RECIPES["vcpo_exact"], "advantage": "loo"}).validate()
