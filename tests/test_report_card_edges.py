"""``python -m report_card``: the command's edge cases (strict JSON, a refusal replacing a passing card,
one-line errors, nothing written outside --out, the plan's cost) and no pass a correction did not earn."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
from _report_card import FIX, ROOT, loaded_fixture  # noqa: F401 (a fixture)

from report_card.load import CorrectionError, registered_correction, unload, validate

# --------------------------------------------------------------------------- edge cases of the command


def _strict_json(text: str):
    def refuse(c):
        raise ValueError(f"not strict JSON: {c}")

    return json.loads(text, parse_constant=refuse)


def test_every_committed_card_is_strict_json():
    from schema.io import loads_json

    cards = sorted((ROOT / "results/cards").glob("*/card.json"))
    assert cards
    for path in cards:
        _strict_json(path.read_text())
        assert loads_json(path.read_text())["name"] == path.parent.name


def test_a_card_s_json_is_the_toolkit_s_strict_json(tmp_path):
    from report_card.card import card_json
    from schema.io import loads_json

    text = card_json({"a": {"b": (1.0, math.nan)}, "c": np.float64(math.inf), "d": np.int64(3), "e": np.arange(2)})
    doc = _strict_json(text)
    assert doc == {"a": {"b": [1.0, "NaN"]}, "c": "Infinity", "d": 3, "e": [0, 1]}
    back = loads_json(text)
    assert math.isnan(back["a"]["b"][1]) and back["c"] == math.inf


def test_a_refusal_replaces_an_earlier_passing_card(tmp_path, capsys):
    from report_card.__main__ import main

    folder = tmp_path / "broken_nan"
    folder.mkdir()
    for name, text in (("card.json", '{"passed": true}'), ("CARD.html", "<p>pass</p>"), ("CARD.md", "pass"),
                       ("f1.png", "png")):
        (folder / name).write_text(text)
    try:
        assert main(["--module", str(FIX / "broken_nan.py"), "--out", str(tmp_path)]) == 2
    finally:
        unload(FIX / "broken_nan.py")
    err = capsys.readouterr().err
    assert "replaced by the refusal" in err and "card.json" in err
    assert sorted(p.name for p in folder.iterdir()) == ["CARD.html", "CARD.md", "card.json"]
    assert _strict_json((folder / "card.json").read_text())["refused"] is True
    assert "Refused" in (folder / "CARD.html").read_text() and "pass</p>" not in (folder / "CARD.html").read_text()


@pytest.mark.parametrize(("fixture", "message"), [
    ("exits_on_import", "exits_on_import.py failed to import: SystemExit"),
    ("bad_metadata", "in_class must be True or False, got 'no'"),
    ("path_name", "a correction's name must be letters"),
])
def test_a_file_that_exits_or_declares_badly_is_one_line(tmp_path, capsys, fixture, message):
    from report_card.__main__ import main

    try:
        rc = main(["--module", str(FIX / f"{fixture}.py"), "--out", str(tmp_path / "out")])
    finally:
        unload(FIX / f"{fixture}.py")
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and message in err[0]
    assert not any(p for p in tmp_path.rglob("*") if p.is_file() and tmp_path / "out" not in p.parents)


def test_nothing_is_written_outside_out(tmp_path):
    from report_card.load import card_folder

    for name in ("../x", "a/b", "/abs", "..", ".", "x/../../y"):
        with pytest.raises(CorrectionError, match="outside"):
            card_folder(tmp_path / "cards", name)
    assert card_folder(tmp_path / "cards", "ok-name_1.2") == tmp_path / "cards" / "ok-name_1.2"


@pytest.mark.parametrize(("fixture", "message"), [
    ("mutates_input", r"writes into the log-ratios it is given"),
    ("exits_in_battery", r"raises SystemExit"),
    ("nan_alone", r"gives a NaN weight for group log-ratios \[5.0, 5.0"),
    ("raises_alone", r"raises ZeroDivisionError on group log-ratios \[-5.0, -5.0, -5.0, -5.0\] \(alone"),
])
def test_the_battery_catches_what_a_run_would_hit(loaded, fixture, message):
    corr = loaded(fixture)
    with pytest.raises(CorrectionError, match=message):
        validate(corr)


def test_a_module_path_without_py(tmp_path, capsys):
    from report_card.__main__ import main

    stem = FIX / "broken_nan"
    plain = tmp_path / "broken_copy"
    plain.write_text((FIX / "broken_nan.py").read_text().replace('"broken_nan"', '"broken_copy"'))
    for path in (stem, plain):
        try:
            rc = main(["--module", str(path), "--out", str(tmp_path / "out")])
        finally:
            unload(path.with_name(path.name + ".py") if path == stem else path)
        err = capsys.readouterr().err
        assert rc == 2 and "NaN weight" in err and "Traceback" not in err


def test_the_plan_scales_with_the_correction_s_own_cost(loaded):
    from report_card.plan import ROBUST_S, _seconds, cost_factor, local_parts

    corr = loaded("slow_trunc")
    k, own, ref = cost_factor(corr)
    assert own >= 0.25 and k == pytest.approx(own / ref) and k > 100
    text = "\n".join(local_parts(corr, (k, own, ref)))
    assert f"scaled by {k:.3g}" in text and f"robustness sweep: computed, about {_seconds(ROBUST_S * k)}" in text
    assert "about 1 s" not in text
    gmc = registered_correction("gmc")
    assert "the times below are the measured ones" in "\n".join(local_parts(gmc, (1.0, 1e-4, 1e-4)))


def test_missing_simulator_results_are_one_line(tmp_path, monkeypatch, capsys):
    from report_card.__main__ import main

    monkeypatch.setenv("GMC_RESULTS", str(tmp_path / "fresh"))
    (tmp_path / "fresh").mkdir()
    rc = main(["--estimator", "topr", "--no-new-runs", "--out", str(tmp_path / "cards")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "python -m simulators.sweep peers" in err[0]


# --------------------------------------------------------------------------- no pass it did not earn


@pytest.mark.parametrize(("fixture", "where", "message"), [
    # NaN at one group size only: the battery runs every G the card uses, and names G and the condition
    ("nan_at_g8", "battery", (r"gives a NaN weight for group log-ratios \[0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0\] "
                              r"\(G = 8, completion 0\)")),
    ("nan_at_g8", "policy_loss", (r"'nan_at_g8' is declared bounded but gives a NaN weight at G = 8 .*the "
                                  r"correction's own weights")),
    # a correction that writes into its inputs: each input compared with its copy after the call, numpy and torch
    ("mutates_input", "battery", r"writes into the log-ratios it is given \(numpy: group"),
    ("mutates_torch", "battery", r"writes into the log-ratios it is given \(torch: group \[1e-06, .*G = 4\)"),
    ("mutates_advantages", "battery", r"writes into the advantages it is given \(torch: group \[-1.0"),
    ("token_mutates", "battery", r"token loss 'token_mutates' writes into the old_logp it is given \(at G = 4"),
    # a loss declared bounded whose infinities policy_loss refuses fails the sweep: they are no refusals
    ("token_inf", "sweep", r"declared bounded, its loss is not finite \('token_inf' is declared bounded but its loss"),
])
def test_a_correction_gets_no_pass_it_did_not_earn(loaded, fixture, where, message):
    import re

    import torch

    from estimators.losses import policy_loss
    from report_card import robustness

    corr = loaded(fixture)
    if where == "battery":
        with pytest.raises(CorrectionError, match=message):
            validate(corr)
    elif where == "sweep":
        validate(corr)  # finite on the battery's ratios: the sweep's 1e4 is where it breaks
        res = robustness.sweep(corr.name)
        assert not res["passed"] and res["refused"] == 0 and res["n_failures"] > 0
        assert re.search(message, res["failures"][0]), res["failures"][0]
    else:
        logp = torch.full((16, 3), -1.0, dtype=torch.float64)
        with pytest.raises(ValueError, match=message) as e:
            policy_loss(corr.name, logp.requires_grad_(), logp.detach() - 0.1, torch.ones(16, 3),
                        torch.linspace(-1, 1, 16, dtype=torch.float64), 8, 0.2)
        assert "scale the advantages" not in str(e.value)


@pytest.mark.parametrize("fixture", ["mutates_input", "mutates_torch", "mutates_advantages", "token_mutates"])
def test_policy_loss_gives_a_correction_copies_so_its_writes_change_nothing_of_the_caller(loaded, fixture):
    """The caller's tensors keep their values whatever the correction writes into what it is given, and a scheme's
    seq_log_ratio (computed by policy_loss, not by the scheme) is the batch's."""
    import torch

    from estimators.losses import policy_loss, trajectory_log_ratio

    corr = loaded(fixture)
    gen = torch.Generator().manual_seed(0)
    old = -torch.rand(8, 3, generator=gen, dtype=torch.float64) * 30.0 - 0.5
    logp = (old + torch.randn(8, 3, generator=gen, dtype=torch.float64)).clamp(max=-1e-3)
    mask, adv = torch.ones(8, 3, dtype=torch.float64), torch.linspace(-1, 1, 8, dtype=torch.float64)
    given = [t.clone() for t in (logp, old, mask, adv)]
    out = policy_loss(corr.name, logp, old, mask, adv, 4, 0.2)
    if corr.level == "trajectory":
        assert torch.equal(out.seq_log_ratio, trajectory_log_ratio(logp, old, mask).reshape(2, 4))
    assert all(torch.equal(a, b) for a, b in zip((logp, old, mask, adv), given))


def test_the_loss_refusal_blames_the_advantages_only_when_their_scale_is_the_cause():
    import torch

    from estimators.losses import policy_loss

    old = torch.full((4, 2), -0.6)
    adv = torch.tensor([3e38, -3e38, 3e38, -3e38])
    with pytest.raises(ValueError, match=r"'gmc': the loss overflows torch.float32 .* at G = 2 .*finite with them "
                                         r"scaled to at most 1 .*scale the advantages down"):
        policy_loss("gmc", old + 0.1, old, torch.ones(4, 2), adv, 2, 0.2)
    with pytest.raises(ValueError, match=r"'sapo' is declared bounded but its loss is -?inf at G = 2 .*not the "
                                         r"advantages' scale; the knobs tau_pos = 1e-40") as e:
        policy_loss("sapo", old + 0.5, old, torch.ones(4, 2), torch.tensor([1.0, -1.0, 1.0, -1.0]), 2, 0.2,
                    tau_pos=1e-40)
    assert "scale the advantages down" not in str(e.value)
