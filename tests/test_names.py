"""One name per concept (docs/GLOSSARY.md): an estimator's name is ``estimator`` along every call,
a knob's flag is ``--<estimator>-<knob>``, and the older names still work, with a warning."""
from __future__ import annotations

import ast
import inspect
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import estimators
from estimators._compat import renamed_keywords
from estimators.losses import check_options, is_batch_coupled, is_bounded, policy_loss, trajectory_loss
from estimators.params import PARAMS, defaults, params_of, resolve
from llm_runs.config import config_fields
from llm_runs.train import build_parser, cli_flags, field_flag

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("estimators", "simulators", "llm_runs", "claims", "report_card", "schema", "figures", "studies", "stats",
            "execution")
SCHEME_PARAMETERS_ALLOWED: set[str] = set()
"""``module:function`` of the functions outside ``bounds`` (whose formulas are per trajectory scheme,
the sub-kind) still allowed a parameter named ``scheme``/``schemes``."""


def scheme_parameters(packages=PACKAGES, root: Path = ROOT) -> list[str]:
    """``path:line function(param)`` of every function whose parameter is named ``scheme`` or ``schemes``."""
    out = []
    for pkg in packages:
        for path in sorted((root / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    a = node.args
                    for arg in a.posonlyargs + a.args + a.kwonlyargs:
                        if arg.arg in ("scheme", "schemes"):
                            out.append(f"{path.relative_to(root)}:{node.lineno} {node.name}({arg.arg})")
    return out


def test_no_parameter_is_named_scheme():
    found = [s for s in scheme_parameters()
             if f"{s.split(':')[0]}:{s.split(' ')[1].split('(')[0]}" not in SCHEME_PARAMETERS_ALLOWED]
    assert not found, "parameters holding an estimator's name are called 'estimator':\n" + "\n".join(found)


def test_the_scanner_finds_a_scheme_parameter(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text("def f(x, *, scheme='gmc'):\n    pass\n\ndef g(estimator):\n    pass\n")
    assert scheme_parameters(("pkg",), tmp_path) == ["pkg/m.py:1 f(scheme)"]


@pytest.mark.parametrize("fn", [estimators.weights, estimators.log_weights, estimators.get_scheme, policy_loss,
                                trajectory_loss, check_options, is_bounded, is_batch_coupled, params_of, defaults,
                                resolve])
def test_an_estimator_s_name_is_called_estimator(fn):
    assert next(iter(inspect.signature(fn).parameters)) == "estimator"


def test_the_update_passes_one_name_down():
    from llm_runs.update import backward_chunks, policy_update

    assert "estimator" in inspect.signature(policy_update).parameters
    assert "estimator=estimator" in inspect.getsource(policy_update)
    assert "policy_loss(estimator," in inspect.getsource(backward_chunks)


# --------------------------------------------------------------------------- deprecated keywords


def _batch(G=4, T=3):
    g = torch.Generator().manual_seed(0)
    logp = -torch.rand(G, T, generator=g, dtype=torch.float64).requires_grad_()
    old = -torch.rand(G, T, generator=g, dtype=torch.float64)
    return logp, old, torch.ones(G, T, dtype=torch.float64), torch.tensor([1.0, -1.0, 0.5, -0.5], dtype=torch.float64)


def _warns_and_equals(call_new, call_old):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        old = call_old()
    assert [w.category for w in caught] == [DeprecationWarning], caught
    assert "deprecated since 2026-12-07 and removed after 2027-06-01" in str(caught[0].message)
    new = call_new()
    return new, old


def test_scheme_keyword_still_gives_the_same_weights():
    lr = np.log([[3.0, 1.0, 1.0, 1.0], [0.5, 2.0, 1.0, 1.0]])
    for fn in (estimators.weights, estimators.log_weights):
        new, old = _warns_and_equals(lambda fn=fn: fn("seq_tis_bn", lr, 0.2, C=2.5),
                                     lambda fn=fn: fn(scheme="seq_tis_bn", log_ratio=lr, eps=0.2, C=2.5))
        assert np.array_equal(new, old)


def test_name_keyword_still_gives_the_same_loss():
    logp, old_logp, mask, adv = _batch()
    for est in ("gmc", "cispo"):
        new, old = _warns_and_equals(lambda e=est: policy_loss(e, logp, old_logp, mask, adv, 4, 0.2),
                                     lambda e=est: policy_loss(name=e, logp=logp, old_logp=old_logp, mask=mask,
                                                               advantages=adv, group_size=4, eps=0.2))
        assert torch.equal(new.loss, old.loss)
    new, old = _warns_and_equals(lambda: trajectory_loss("gmc", logp, old_logp, mask, adv, 4, 0.2),
                                 lambda: trajectory_loss(scheme="gmc", logp=logp, old_logp=old_logp, mask=mask,
                                                         advantages=adv, group_size=4, eps=0.2))
    assert torch.equal(new.loss, old.loss)
    pairs = [(lambda: estimators.get_scheme("seq_tis"), lambda: estimators.get_scheme(name="seq_tis")),
             (lambda: check_options("sapo", {}), lambda: check_options(name="sapo", options={})),
             (lambda: is_bounded("gspo"), lambda: is_bounded(name="gspo")),
             (lambda: is_batch_coupled("m2po"), lambda: is_batch_coupled(name="m2po"))]
    for call_new, call_old in pairs:
        new, old = _warns_and_equals(call_new, call_old)
        assert new == old


@pytest.mark.parametrize("call", [lambda: resolve(name="seq_tis", given={"C": 3.0}),
                                  lambda: params_of(name="seq_mis"), lambda: defaults(name="vespo")])
def test_an_internal_function_takes_today_s_names_only(call):
    with pytest.raises(TypeError, match="unexpected keyword argument 'name'"):
        call()


def test_the_groups_per_batch_keywords_still_give_the_same_values():
    from bounds.normalised import trajectory_share_bound

    spec = estimators.get_scheme("seq_tis_bn")
    for call_new, call_old in [(lambda: spec.group_mass_sup(0.2, prompts_per_step=4),
                                lambda: spec.group_mass_sup(0.2, num_groups=4)),
                               (lambda: spec.member(0.2, prompts_per_step=4), lambda: spec.member(0.2, num_groups=4)),
                               (lambda: trajectory_share_bound("gmc", 8, 0.2, prompts_per_step=4),
                                lambda: trajectory_share_bound("gmc", 8, 0.2, ngroups=4))]:
        new, old = _warns_and_equals(call_new, call_old)
        assert new == old
    assert spec.group_mass_sup(0.2, 4) == 4.0 and trajectory_share_bound("gmc", 8, 0.2, 4) == pytest.approx(1.2 / 4)


def test_an_alias_and_its_name_together_are_refused():
    @renamed_keywords(scheme="estimator")
    def f(estimator):
        return estimator

    with pytest.raises(TypeError, match="both 'estimator' and its deprecated alias 'scheme'"):
        f(estimator="gmc", scheme="is")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert f("gmc") == f(estimator="gmc") == "gmc"  # today's names never warn


def _renamed_functions():
    """``(module, function, {old: new})`` of every function in the packages that keeps deprecated keywords."""
    import importlib
    import pkgutil

    out = []
    for pkg in ("estimators", "bounds", "simulators", "llm_runs", "claims", "report_card", "schema"):
        mod = importlib.import_module(pkg)
        names = [pkg] + [m.name for m in pkgutil.walk_packages(mod.__path__, pkg + ".")
                         if ".integrations.verl" not in m.name and not m.name.endswith("__main__")]
        for name in names:
            try:
                m = importlib.import_module(name)
            except ImportError:  # an optional dependency (TRL, Ray) absent here
                continue
            for _, obj in inspect.getmembers(m):
                for fn in [obj, *(v for v in vars(obj).values() if callable(v))] if inspect.isclass(obj) else [obj]:
                    if callable(fn) and getattr(fn, "__module__", None) == name and hasattr(fn, "__renamed_keywords__"):
                        out.append((name, fn.__qualname__, fn.__renamed_keywords__))
    return out


PUBLIC_ALIASED = {
    "bounds.normalised": {"sign_error_bound", "trajectory_share_bound", "weight_max"},
    "estimators.baselines": {"otb_advantages"},
    "estimators.losses.dispatch": {"policy_loss"},
    "estimators.losses.registry": {"check_options", "is_batch_coupled", "is_bounded"},
    "estimators.losses.trajectory": {"trajectory_loss"},
    "estimators.schemes": {"Scheme.group_mass_sup", "Scheme.member", "get_scheme", "log_weights", "weights"},
    "llm_runs.integrations.trl": {"TrajectoryGRPOTrainer.__init__"},
    "simulators.bandit.env": {"exact_all", "exact_moments", "mc_moments", "per_sample_moments"},
    "simulators.token_mdp.env": {"exact_moments", "mc_moments", "per_sample_moments"},
}
"""The functions (verl's plugin aside: ``llm_runs.integrations.verl`` imports verl) that keep deprecated
keywords: the public API only, each named in docs/ or README.md or exported by its package's ``__all__``."""


def _is_public(module: str, qualname: str, docs: str) -> bool:
    import importlib
    import re

    owner = qualname.split(".")[0]
    if re.search(rf"(?:[`.]|import ){re.escape(owner)}\b", docs):  # `name`, module.name, import name
        return True
    parts = module.split(".")
    return any(owner in getattr(importlib.import_module(".".join(parts[:k])), "__all__", ())
               for k in range(1, len(parts)))


def test_only_the_public_api_keeps_deprecated_keywords_each_with_its_dates():
    docs = "\n".join(p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
                     if p.name != "GLOSSARY.md")
    found = _renamed_functions()
    got: dict[str, set] = {}
    for module, qualname, _ in found:
        got.setdefault(module, set()).add(qualname)
        assert _is_public(module, qualname, docs), (module, qualname)
        src = inspect.getsource(importlib_attr(module, qualname).__wrapped__)
        deco = next(line for line in src.splitlines() if "@renamed_keywords(" in line)
        assert deco.endswith("# deprecated 2026-12-07, removed after 2027-06-01"), (module, qualname, deco)
    assert got == PUBLIC_ALIASED
    assert not _is_public("simulators.core.env", "OutcomeEnv.mc_moments", docs)  # the check can fail


def test_every_alias_is_in_the_glossary_and_names_today_s_parameter():
    glossary = (ROOT / "docs" / "GLOSSARY.md").read_text()
    found = _renamed_functions()
    assert len(found) == sum(map(len, PUBLIC_ALIASED.values())) == 22
    for module, qualname, renamed in found:
        fn = importlib_attr(module, qualname)
        params = inspect.signature(fn).parameters
        for old, new in renamed.items():
            assert f"`{old}=`" in glossary, (module, qualname, old)
            assert new in params and old not in params, (module, qualname, old, new)


def importlib_attr(module: str, qualname: str):
    import importlib

    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def test_a_simulator_keeps_its_old_keyword():
    from simulators import bandit

    theta, theta_b, r = np.array([0.5, 0.0, -0.5]), np.zeros(3), np.array([1.0, 0.0, 1.0])
    new, old = _warns_and_equals(lambda: bandit.exact_moments(theta, theta_b, r, G=3, eps=0.2, estimator="gmc"),
                                 lambda: bandit.exact_moments(theta, theta_b, r, G=3, eps=0.2, scheme="gmc"))
    assert np.array_equal(new["mean_grad"], old["mean_grad"])


def test_the_report_card_takes_estimator_and_its_old_flag(tmp_path, capsys):
    from report_card.__main__ import main

    for flag in ("--estimator", "--name"):
        assert main([flag, "no_such_correction", "--out", str(tmp_path)]) == 2
        assert "no registered correction named 'no_such_correction'" in capsys.readouterr().err


# --------------------------------------------------------------------------- knob flags


def _knob_fields():
    return [f for f in config_fields() if "knob" in f.metadata]


def test_every_knob_field_and_flag_is_estimator_knob():
    """One spelling: a knob's field is ``<estimator>_<knob>`` and its flag that field's name, ``-`` for ``_``."""
    fields = _knob_fields()
    assert {f.metadata["knob"] for f in fields} == {(e, p.name) for e, ps in PARAMS.items() for p in ps}
    parser = build_parser()
    shown = parser.format_help()
    for f in fields:
        est, knob = f.metadata["knob"]
        assert f.name == f"{est}_{knob}".lower()
        flag = f"--{est.replace('_', '-')}-{knob.replace('_', '-').lower()}"
        assert field_flag(f) == flag
        assert parser._option_string_actions[flag].dest == f.name
        assert flag in shown
    assert "--seq-geo-mask-c" in shown and "--seq-tis-bn-c" in shown and "--dppo-tv-delta" in shown


def test_old_flags_parse_to_the_same_config_and_are_hidden():
    from schema.runs import RENAMED_FIELDS

    parser = build_parser()
    shown = parser.format_help()
    fields = {f.name: f for f in config_fields()}
    olds = {f"--{old.replace('_', '-')}": new for old, new in RENAMED_FIELDS.items()}
    olds["--num-groups"] = "prompts_per_step"
    assert {"--geo-cap", "--tis-cap", "--seq-tis-cap", "--mis-low", "--dppo-delta"} <= set(olds)
    for i, (old, name) in enumerate(sorted(olds.items())):
        f = fields[name]
        value = "3" if f.type == "int" else repr(1.5 + i / 100)
        new = vars(parser.parse_args(["--out", "x", f"{field_flag(f)}={value}"]))
        before = vars(parser.parse_args(["--out", "x", f"{old}={value}"]))
        assert new == before and name in new
        assert f"{old} " not in shown and f"{old}\n" not in shown


def test_cli_flags_round_trip_through_the_parser():
    parser = build_parser()
    given = {"estimator": "seq_geo_mask", "seq_geo_mask_c": 2.0, "seq_geo_mask_lo": 0.99, "seq_tis_bn_c": 3.0,
             "prompts_per_step": 4, "dppo_tv_delta": 0.1}
    flags = cli_flags(given)
    assert "--seq-geo-mask-c=2.0" in flags and "--prompts-per-step=4" in flags
    parsed = vars(parser.parse_args(["--out", "x", *flags]))
    assert {k: parsed[k] for k in given} == given
    stored = {"estimator": "seq_geo_mask", "geo_cap": 2.0, "tis_cap": 3.0}  # an older run's stored names
    assert cli_flags(stored) == ["--estimator=seq_geo_mask", "--geo-cap=2.0", "--tis-cap=3.0"]
    parsed = vars(parser.parse_args(["--out", "x", *cli_flags(stored)]))
    assert (parsed["seq_geo_mask_c"], parsed["seq_tis_bn_c"]) == (2.0, 3.0)


def test_a_knob_is_defined_once():
    """The config takes a knob's default and symbol from PARAMS; LEGACY_FIELDS records only what older
    runs used (no knob default of its own: None, today's default)."""
    from schema.runs import LEGACY_FIELDS

    for f in _knob_fields():
        est, knob = f.metadata["knob"]
        p = next(q for q in PARAMS[est] if q.name == knob)
        assert (f.default, f.metadata["symbol"]) == (p.default, p.symbol)
        if f.name in LEGACY_FIELDS and f.name not in ("gspo_eps_low", "gspo_eps_high"):
            assert LEGACY_FIELDS[f.name][0] is None, f.name


# --------------------------------------------------------------------------- the estimator column of result files


def test_one_reader_gives_the_estimator_column_for_either_stored_name():
    import pandas as pd

    from schema.results import with_estimator_column

    legacy = pd.DataFrame({"scheme": ["gmc", "topr"], "G": [4, 8]})
    today = pd.DataFrame({"estimator": ["gmc", "topr"], "G": [4, 8]})
    for df in (legacy, today):
        out = with_estimator_column(df)
        assert out["estimator"].tolist() == out["scheme"].tolist() == ["gmc", "topr"]
        assert out["G"].tolist() == [4, 8]
    both = legacy.assign(estimator=["gmc", "topr"])
    assert with_estimator_column(both) is both
    with pytest.raises(ValueError, match="name different estimators"):
        with_estimator_column(legacy.assign(estimator=["gmc", "is"]))
    neither = pd.DataFrame({"G": [4]})
    assert list(with_estimator_column(neither).columns) == ["G"]


def test_a_committed_simulator_table_reads_with_its_estimator_column():
    from schema.results import TUNED, read_sim

    df = read_sim(TUNED)  # committed (results/sim/tuned_delay)
    assert len(df) and df["estimator"].equals(df["scheme"])


def test_verls_knob_reader_has_the_estimators_name_and_the_old_one_warns():
    from types import SimpleNamespace

    from llm_runs.integrations.verl.settings import estimator_options_from, scheme_options_from

    config = SimpleNamespace(policy_loss={"kappa": 2.0})
    assert estimator_options_from(config, "gmc_cap") == {"kappa": 2.0}
    with pytest.warns(DeprecationWarning, match="use estimator_options_from"):
        assert scheme_options_from(config, "gmc_cap") == {"kappa": 2.0}
