"""The verl plugin, exercised through verl's own registries and the README snippet's config."""
from __future__ import annotations

import importlib
import re
import subprocess
import sys
import typing
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import verl
from omegaconf import DictConfig, ListConfig, OmegaConf
from verl.trainer.ppo import core_algos
from verl.utils.import_utils import import_external_libs

import estimators
from estimators.losses import trajectory_loss
from llm_runs.integrations import verl as verl_integration
from llm_runs.integrations import verl_plugin  # noqa: F401 (importing it installs the plugin, as external_lib does)
from llm_runs.integrations._common import check_contiguous_groups

REPO = Path(__file__).resolve().parents[2]
SNIPPET = REPO / "README.md"  # the README's own verl snippet is what these tests exercise
VERL_DEFAULTS = Path(verl.__file__).parent / "trainer" / "config" / "_generated_ppo_trainer.yaml"
_ABSENT = object()


# --------------------------------------------------------------------------- helpers


def snippet_overrides() -> list[str]:
    """The ``key=value`` overrides of the bash block in the README snippet, verbatim."""
    block = re.search(r"```bash\n(python3 -m verl\.trainer\.main_ppo.*?)```", SNIPPET.read_text(), re.DOTALL)
    assert block, f"no ```bash block running verl.trainer.main_ppo in {SNIPPET}"
    overrides = [tok for tok in block.group(1).replace("\\\n", " ").split() if "=" in tok]
    assert len(overrides) >= 5, overrides
    return overrides


def verl_config(overrides: list[str]) -> DictConfig:
    """verl's generated default PPO config with ``overrides`` applied, as Hydra applies them:
    ``key=value`` must name an existing setting, ``+key=value`` adds one."""
    base = OmegaConf.load(VERL_DEFAULTS)
    for item in overrides:
        key = item.partition("=")[0]
        if key.startswith("+"):
            assert OmegaConf.select(base, key[1:], default=_ABSENT) is _ABSENT, f"{key[1:]} exists: drop the +"
        else:
            assert OmegaConf.select(base, key, default=_ABSENT) is not _ABSENT, f"{key} is not a verl setting"
    return OmegaConf.merge(base, OmegaConf.from_dotlist([item.removeprefix("+") for item in overrides]))


def instantiate(node):
    """hydra.utils.instantiate(_convert_="partial") for verl's dataclass configs (hydra is not installed)."""
    if isinstance(node, DictConfig):
        if "_target_" in node:
            module, _, name = node._target_.rpartition(".")
            cls = getattr(importlib.import_module(module), name)
            return cls(**{k: instantiate(v) for k, v in node.items() if k != "_target_"})
        return {k: instantiate(v) for k, v in node.items()}
    if isinstance(node, ListConfig):
        return [instantiate(v) for v in node]
    return node


def actor_config(cfg: DictConfig):
    """The ActorConfig dataclass verl's workers pass to the policy loss as ``config``."""
    return instantiate(OmegaConf.create(OmegaConf.to_container(cfg.actor_rollout_ref.actor, resolve=True)))


def random_batch(seed: int, prompts_per_step: int, G: int, T: int = 7, spread: float = 0.35, binary: bool = True):
    """Interleaved groups (as verl's ``batch.repeat(interleave=True)``), rewards, behaviour log-probs."""
    g = torch.Generator().manual_seed(seed)
    B = prompts_per_step * G
    mask = torch.rand(B, T, generator=g) < 0.8
    mask[:, 0] = True
    old = -3 * torch.rand(B, T, generator=g, dtype=torch.float64)
    new = old + spread * torch.randn(B, T, generator=g, dtype=torch.float64)
    rewards = torch.zeros(B, T, dtype=torch.float64)
    last = mask.to(torch.int64).cumsum(-1).argmax(-1)
    score = torch.randint(0, 2, (B,), generator=g).to(torch.float64) if binary else torch.rand(B, generator=g,
                                                                                              dtype=torch.float64)
    rewards[torch.arange(B), last] = score
    index = np.repeat(np.array([f"uid-{k}" for k in range(prompts_per_step)], dtype=object), G)
    return SimpleNamespace(B=B, mask=mask, old=old, new=new, rewards=rewards, index=index)


def run_micro_batches(loss_fn, cfg_actor, batch, advantages):
    """verl's ppo_loss per micro-batch (global_batch_info as the engine sets it); returns summed loss, grad, metrics."""
    mbs = cfg_actor.ppo_micro_batch_size_per_gpu
    logp = batch.new.clone().requires_grad_(True)
    total, metrics = 0.0, []
    for start in range(0, batch.B, mbs):
        rows = slice(start, start + mbs)
        cfg_actor.global_batch_info.update(dp_size=1, batch_num_tokens=int(batch.mask.sum()),
                                           global_batch_size=batch.B, loss_scale_factor=None)
        loss, m = loss_fn(old_log_prob=batch.old[rows], log_prob=logp[rows], advantages=advantages[rows],
                          response_mask=batch.mask[rows], loss_agg_mode=cfg_actor.loss_agg_mode,
                          config=cfg_actor, rollout_is_weights=None,
                          **({"rollout_log_probs": batch.old[rows]}
                             if hasattr(loss_fn, "gmc_plugin_estimator") else {}))
        total = total + loss
        metrics.append(m)
    total.backward()
    return total.detach(), logp.grad, metrics


@pytest.fixture(scope="module")
def snippet_cfg():
    cfg = verl_config(snippet_overrides())
    import_external_libs(cfg.actor_rollout_ref.model.external_lib)  # what verl's HFModelConfig does
    return cfg


# --------------------------------------------------------------------------- tests


def test_import_without_verl():
    """The plugin imports (and registers nothing) when verl cannot be imported; register() then says why."""
    code = """
import sys
class BlockVerl:
    def find_spec(self, name, path=None, target=None):
        if name == "verl" or name.startswith("verl."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, BlockVerl())
import llm_runs.integrations.verl_plugin as vp
assert vp.REGISTERED == [], vp.REGISTERED
assert not [m for m in sys.modules if m == "verl" or m.startswith("verl.")]
try:
    import llm_runs.integrations.verl as pkg
    pkg.register()
except ImportError as exc:
    assert "verl is not installed" in str(exc), exc
else:
    raise SystemExit("register() without verl did not raise")
print("plugin-ok")
"""
    res = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                         check=False)
    assert res.returncode == 0 and "plugin-ok" in res.stdout, res.stderr[-2000:]


def test_snippet_registers_through_verl(snippet_cfg):
    assert snippet_cfg.actor_rollout_ref.model.external_lib == "llm_runs.integrations.verl_plugin"
    for name in ("gmc", "tic_mask", "tic_trunc"):
        assert core_algos.get_policy_loss_fn(name).gmc_plugin_estimator == name
    assert core_algos.get_adv_estimator_fn(snippet_cfg.algorithm.adv_estimator) is not None
    assert verl_integration.return_style(core_algos) == verl_integration.METRICS_STYLE


@pytest.mark.parametrize("scheme", ["gmc", "tic_mask", "tic_trunc"])
def test_snippet_loss_equals_core_surrogate_and_closed_form_gradient(snippet_cfg, scheme):
    cfg = verl_config(snippet_overrides() + [f"actor_rollout_ref.actor.policy_loss.loss_mode={scheme}"])
    actor = actor_config(cfg)
    G, eps = cfg.actor_rollout_ref.rollout.n, cfg.actor_rollout_ref.actor.clip_ratio_high
    assert actor.rollout_n == G and actor.ppo_micro_batch_size_per_gpu % G == 0
    batch = random_batch(seed=11, prompts_per_step=4, G=G)

    adv_fn = core_algos.get_adv_estimator_fn(cfg.algorithm.adv_estimator)
    adv, _ = adv_fn(token_level_rewards=batch.rewards, response_mask=batch.mask.double(), index=batch.index,
                    config=instantiate(cfg.algorithm))
    A = adv[:, 0].reshape(-1, G)
    r = batch.rewards.sum(-1).reshape(-1, G)
    assert torch.allclose(A, (r - (r.sum(-1, keepdim=True) - r) / (G - 1)), atol=1e-12)  # leave-one-out

    loss_fn = core_algos.get_policy_loss_fn(actor.policy_loss.loss_mode)
    loss, grad, metrics = run_micro_batches(loss_fn, actor, batch, adv)

    core = trajectory_loss(scheme, batch.new, batch.old, batch.mask, A, G, eps)
    assert abs(float(loss) - float(core.loss)) <= 1e-12

    # closed form: d loss / d logp[i, t] = -(1/B) c_i A_i mask[i, t]  (g_hat(c) averaged over groups)
    lr = ((batch.new - batch.old) * batch.mask).sum(-1).reshape(-1, G)
    w = lr.exp()
    if scheme == "gmc":
        c = torch.clamp(G * (1 + eps) / w.sum(-1, keepdim=True), max=1.0) * w
    elif scheme == "tic_mask":
        c = w * (w <= 1 + eps)
    else:
        c = torch.clamp(w, max=1 + eps)
    assert torch.allclose(c, estimators.weights(scheme, lr, eps), atol=1e-12)
    expected = -(c * A).reshape(-1, 1) * batch.mask / batch.B
    assert torch.allclose(grad, expected, atol=1e-12)

    capped = np.mean([m["actor/stale/mass_cap_frac"] for m in metrics])
    assert 0 < capped < 1, "test data must cap some groups and leave others"
    assert all(k.startswith(("actor/stale/", "actor/train/weight_", "actor/mech/", "actor/drift/")) for m in metrics
               for k in m)
    assert {"actor/stale/clip_frac", "actor/stale/ess", "actor/stale/log_ratio_max", "actor/stale/chi2",
            "actor/stale/mass_bias", "actor/stale/chi2_seq_verl", "actor/train/weight_max", "actor/mech/lambda_min",
            "actor/mech/kl"} <= set(metrics[0])
    # the trainer's names with the trainer's values: the largest weight of any micro-batch is the batch's
    assert max(m["actor/train/weight_max"] for m in metrics) == pytest.approx(float(c.max()), rel=1e-9)
    lam = estimators.gmc_lambda(lr, eps)  # GMC's group scale on the raw ratios, whatever the scheme
    assert min(m["actor/mech/lambda_min"] for m in metrics) == pytest.approx(float(lam.min()), rel=1e-9)
    assert all(m["actor/mech/kl"] > 0 for m in metrics)


@pytest.mark.parametrize("scheme", ["seq_geo_mask", "vespo"])
def test_2025_trajectory_peers_register_through_verl_and_equal_their_closed_form(snippet_cfg, scheme):
    # verl ships its own sapo / dppo_tv (token-level here, never registered by the plugin); the
    # trajectory-level newcomers are plugin losses like gmc
    assert core_algos.get_policy_loss_fn(scheme).gmc_plugin_estimator == scheme
    assert core_algos.get_policy_loss_fn("sapo").__module__.startswith("verl.")
    # responses of several lengths: seq_geo_mask's L is given (not the batch's), here L = 1
    length = ["+actor_rollout_ref.actor.policy_loss.length=1.0"] if scheme == "seq_geo_mask" else []
    cfg = verl_config(snippet_overrides() + [f"actor_rollout_ref.actor.policy_loss.loss_mode={scheme}", *length])
    actor = actor_config(cfg)
    G, eps = cfg.actor_rollout_ref.rollout.n, cfg.actor_rollout_ref.actor.clip_ratio_high
    batch = random_batch(seed=11, prompts_per_step=4, G=G)
    adv_fn = core_algos.get_adv_estimator_fn(cfg.algorithm.adv_estimator)
    adv, _ = adv_fn(token_level_rewards=batch.rewards, response_mask=batch.mask.double(), index=batch.index,
                    config=instantiate(cfg.algorithm))
    A = adv[:, 0].reshape(-1, G)
    loss, grad, _ = run_micro_batches(core_algos.get_policy_loss_fn(scheme), actor, batch, adv)
    core = trajectory_loss(scheme, batch.new, batch.old, batch.mask, A, G, eps)
    assert abs(float(loss) - float(core.loss)) <= 1e-12
    lr = ((batch.new - batch.old) * batch.mask).sum(-1).reshape(-1, G)
    w = lr.exp()
    if scheme == "vespo":  # w^k e^(lambda (1 - w)), (k, lambda) = (2, 3) if A >= 0 else (3, 2)
        pos = A >= 0
        k = torch.where(pos, torch.full_like(w, 2.0), torch.full_like(w, 3.0))
        lam = torch.where(pos, torch.full_like(w, 3.0), torch.full_like(w, 2.0))
        c = w**k * torch.exp(lam * (1 - w))
    else:  # kept iff 0.999 <= w <= 1.001 (L = 1), weight 1
        c = ((w >= 0.999) & (w <= 1.001)).to(w.dtype)
    assert torch.allclose(c, estimators.weights(scheme, lr, eps, A), atol=1e-12)
    expected = -(c * A).reshape(-1, 1) * batch.mask / batch.B
    assert torch.allclose(grad, expected, atol=1e-12)


def test_tic_trunc_without_capping_is_plain_is_and_not_vanilla(snippet_cfg):
    big = 1e6
    cfg = verl_config(snippet_overrides() + [f"actor_rollout_ref.actor.clip_ratio_high={big}"])
    G = cfg.actor_rollout_ref.rollout.n
    batch = random_batch(seed=5, prompts_per_step=3, G=G)
    adv, _ = core_algos.get_adv_estimator_fn("gmc_loo")(token_level_rewards=batch.rewards,
                                                        response_mask=batch.mask.double(), index=batch.index)
    results = {}
    for name in ("tic_trunc", "is", "vanilla"):
        actor = actor_config(verl_config(snippet_overrides() + [
            f"actor_rollout_ref.actor.clip_ratio_high={big}", f"actor_rollout_ref.actor.policy_loss.loss_mode={name}"]))
        results[name] = run_micro_batches(core_algos.get_policy_loss_fn(name), actor, batch, adv)[:2]
    lr = ((batch.new - batch.old) * batch.mask).sum(-1)
    plain_is = -(lr.exp() * adv[:, 0]).mean()
    assert abs(float(results["tic_trunc"][0]) - float(plain_is)) <= 1e-12
    assert torch.allclose(results["tic_trunc"][1], results["is"][1], atol=1e-12)
    assert abs(float(results["vanilla"][0]) - float(plain_is)) > 1e-3
    assert not torch.allclose(results["vanilla"][1], results["tic_trunc"][1], atol=1e-6)


def test_engine_path_groups_rows_by_uid_in_any_order(snippet_cfg):
    """With the micro-batch's uids (what EngineLoss hands over on verl's engine path) the loss
    takes the groups from the data: a micro-batch whose rows are scattered gives the loss of the
    grouped rows; without the uids the same rows are refused; a group cut in two is refused."""
    actor = actor_config(snippet_cfg)
    G = actor.rollout_n
    loss_fn = core_algos.get_policy_loss_fn("gmc")
    adv_fn = core_algos.get_adv_estimator_fn("gmc_loo")
    batch = random_batch(seed=5, prompts_per_step=3, G=G, binary=False, spread=0.6)
    adv, _ = adv_fn(token_level_rewards=batch.rewards, response_mask=batch.mask.double(), index=batch.index)
    actor.global_batch_info.update(dp_size=1, global_batch_size=batch.B)
    actor.ppo_micro_batch_size_per_gpu = batch.B
    perm = torch.randperm(batch.B, generator=torch.Generator().manual_seed(6))
    with pytest.raises(ValueError, match="split or not contiguous"):
        check_contiguous_groups(list(batch.index[perm.numpy()]))
    call = {"old_log_prob": batch.old[perm], "log_prob": batch.new[perm], "advantages": adv[perm],
            "response_mask": batch.mask[perm], "loss_agg_mode": "token-mean", "config": actor,
            "rollout_log_probs": batch.old[perm]}
    with verl_integration.group_ids(batch.index[perm.numpy()]):
        loss, metrics = loss_fn(**call)
    want_adv = (adv * batch.mask).sum(-1) / batch.mask.sum(-1)
    want = trajectory_loss("gmc", batch.new, batch.old, batch.mask, want_adv, G, actor.clip_ratio_high)
    assert float(loss) == pytest.approx(float(want.loss), abs=1e-12)
    diag = {**estimators.diagnostics(want.seq_log_ratio, actor.clip_ratio_high), **want.metrics}
    from llm_runs.integrations._common import batch_statistics

    want.metrics = diag
    expected = {**{f"actor/{k}": v for k, v in batch_statistics(want, batch.new, batch.old, batch.mask, "gmc",
                                                                   actor.clip_ratio_high).items()},
                **verl_integration.metric_names(diag, prefix="actor/")}
    assert metrics.keys() == expected.keys()
    assert all(metrics[k] == pytest.approx(v, rel=1e-9, abs=1e-12) for k, v in expected.items())
    assert max(diag.values()) > 0 and bool((want.weights < want.seq_log_ratio.exp() - 1e-12).any())
    with pytest.raises(ValueError, match="are not one group"):
        loss_fn(**call)
    half = perm[: 2 * G]  # a multiple of G rows, but scattered rows hold parts of groups
    with verl_integration.group_ids(batch.index[half.numpy()]), pytest.raises(ValueError, match=f"not G = {G}"):
        loss_fn(**{**call, **{k: v[: len(half)] for k, v in call.items() if torch.is_tensor(v)}})


def test_split_groups_give_clear_errors(snippet_cfg):
    actor = actor_config(snippet_cfg)
    G = actor.rollout_n
    loss_fn = core_algos.get_policy_loss_fn("gmc")
    adv_fn = core_algos.get_adv_estimator_fn("gmc_loo")
    batch = random_batch(seed=3, prompts_per_step=4, G=G, binary=False)  # continuous: no group sums to 0 by chance
    adv, _ = adv_fn(token_level_rewards=batch.rewards, response_mask=batch.mask.double(), index=batch.index)
    call = {"old_log_prob": batch.old, "log_prob": batch.new, "advantages": adv, "response_mask": batch.mask,
            "loss_agg_mode": "token-mean", "rollout_is_weights": None, "rollout_log_probs": batch.old}
    actor.global_batch_info.update(dp_size=1, global_batch_size=batch.B)

    # groups of unequal size: the estimator names the uid
    with pytest.raises(ValueError, match=f"uid 'uid-3' has {G - 3} rows but uid 'uid-0' has {G}"):
        adv_fn(token_level_rewards=batch.rewards[:-3], response_mask=batch.mask[:-3].double(),
               index=batch.index[:-3])

    # a micro-batch cutting a group
    rows = slice(0, G + G // 2)
    with pytest.raises(ValueError, match=f"does not hold whole groups of G = {G}"):
        loss_fn(**{**call, **{k: call[k][rows] for k in ("old_log_prob", "log_prob", "advantages", "response_mask")}},
                config=actor)

    # rows shifted by half a group: B is a multiple of G, but the blocks mix two groups
    shift = torch.roll(torch.arange(batch.B), G // 2)
    with pytest.raises(ValueError, match="are not one group"):
        loss_fn(**{**call, **{k: call[k][shift] for k in ("old_log_prob", "log_prob", "advantages", "response_mask",
                                                           "rollout_log_probs")}},
                config=actor)

    # settings that reorder rows between the estimator and the loss
    for override, pattern in (("actor_rollout_ref.actor.shuffle=True", "shuffle"),
                              ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=12", "not a multiple")):
        bad = actor_config(verl_config(snippet_overrides() + [override]))
        with pytest.raises(ValueError, match=pattern):
            loss_fn(**call, config=bad)

    # the loss itself agrees with the core on the intact batch
    loss, _ = loss_fn(**call, config=actor)
    core = trajectory_loss("gmc", batch.new, batch.old, batch.mask, adv[:, 0], G, actor.clip_ratio_high)
    assert abs(float(loss) - float(core.loss)) <= 1e-12


def _fake_core_algos(ret, vanilla_ret, with_rollout_arg: bool):
    """A stand-in for an older verl's core_algos: its registry, PolicyLossFn type and vanilla loss."""
    registry: dict = {}

    def register_policy_loss(name):
        def deco(fn):
            registry[name] = fn
            return fn
        return deco

    T = torch.Tensor
    params = [T, T, T, T, str, DictConfig | None] + ([T | None] if with_rollout_arg else [])
    fake = SimpleNamespace(POLICY_LOSS_REGISTRY=registry, register_policy_loss=register_policy_loss)
    if ret is not None:
        fake.PolicyLossFn = typing.Callable[params, ret]
    if vanilla_ret is not None:
        def compute_policy_loss_vanilla(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean",
                                        config=None):
            raise AssertionError("never called")
        compute_policy_loss_vanilla.__annotations__["return"] = vanilla_ret
        fake.compute_policy_loss_vanilla = compute_policy_loss_vanilla
    return fake


def test_old_style_four_tuple_detected_and_returned():
    T = torch.Tensor
    old_ret = tuple[T, T, T, T]
    fake = _fake_core_algos(old_ret, old_ret, with_rollout_arg=False)  # verl 0.4-style
    assert verl_integration.return_style(fake) == verl_integration.TUPLE4_STYLE
    names = verl_integration.register(fake)
    assert {"gmc", "tic_mask", "tic_trunc"} <= set(names) <= set(fake.POLICY_LOSS_REGISTRY)

    G, eps = 4, 0.2
    batch = random_batch(seed=8, prompts_per_step=3, G=G, spread=0.5)
    adv, _ = verl_integration.grouped_advantages("loo", batch.rewards, batch.mask.double(), batch.index)
    old_cfg = OmegaConf.create({"clip_ratio": eps, "clip_ratio_high": None, "shuffle": False,
                                "ppo_micro_batch_size_per_gpu": batch.B,
                                # verl 0.4: no rollout log-probs
                                "policy_loss": {"group_size": G, "behaviour": "recomputed"}})
    # the old actor's call: pg_loss, pg_clipfrac, ppo_kl, pg_clipfrac_lower = policy_loss_fn(...)
    pg_loss, clipfrac, ppo_kl, capped = fake.POLICY_LOSS_REGISTRY["gmc"](
        old_log_prob=batch.old, log_prob=batch.new, advantages=adv, response_mask=batch.mask,
        loss_agg_mode="token-mean", config=old_cfg)
    core = trajectory_loss("gmc", batch.new, batch.old, batch.mask, adv[:, 0], G, eps)
    assert abs(float(pg_loss) - float(core.loss)) <= 1e-12
    diag = estimators.diagnostics(core.seq_log_ratio, eps)
    assert float(clipfrac) == pytest.approx(diag["frac_clipped"])
    assert float(capped) == pytest.approx(diag["frac_groups_capped"])
    m = batch.mask.double()
    assert float(ppo_kl) == pytest.approx(float(((batch.old - batch.new) * m).sum() / m.sum()))

    # verl 0.5 passed rollout_log_probs: under behaviour=rollout they are the ratio's behaviour log-probs
    fn = fake.POLICY_LOSS_REGISTRY["tic_trunc"]
    kw = {"old_log_prob": batch.old, "log_prob": batch.new, "advantages": adv, "response_mask": batch.mask,
          "config": old_cfg}
    assert len(fn(**kw, rollout_log_probs=None)) == 4
    rollout_cfg = OmegaConf.merge(old_cfg, {"policy_loss": {"behaviour": "rollout"}})
    rollout = batch.old - 0.2 * batch.mask
    got = fn(**{**kw, "config": rollout_cfg}, rollout_log_probs=rollout)[0]
    want = trajectory_loss("tic_trunc", batch.new, rollout, batch.mask, adv[:, 0], G, eps).loss
    assert abs(float(got) - float(want)) <= 1e-12
    with pytest.raises(ValueError, match="carries no rollout_log_probs"):
        fn(**{**kw, "config": rollout_cfg})

    # an installed name that is not ours is never overwritten
    fake.POLICY_LOSS_REGISTRY["gmc"] = lambda *a, **k: None
    with pytest.raises(ValueError, match="already has a policy loss named 'gmc'"):
        verl_integration.register(fake)


def test_return_style_is_read_not_guessed():
    T = torch.Tensor
    new_ret = tuple[T, dict[str, typing.Any]]
    assert verl_integration.return_style(_fake_core_algos(new_ret, None, True)) == verl_integration.METRICS_STYLE
    assert verl_integration.return_style(_fake_core_algos(None, "tuple[torch.Tensor, dict[str, Any]]", True)) \
        == "metrics"
    with pytest.raises(RuntimeError, match="refusing to guess"):
        verl_integration.return_style(_fake_core_algos(None, None, True))
    with pytest.raises(RuntimeError, match="refusing to guess"):
        verl_integration.return_style(_fake_core_algos(new_ret, tuple[T, T, T, T], True))


def test_rollout_is_weights_sequence_level_only(snippet_cfg):
    """verl's decoupled form (behaviour=recomputed): rollout_is_weights multiply the advantage."""
    recomputed = ["+actor_rollout_ref.actor.policy_loss.behaviour=recomputed"]
    actor = actor_config(verl_config(snippet_overrides() + recomputed))
    G = actor.rollout_n
    batch = random_batch(seed=21, prompts_per_step=2, G=G, binary=False)
    adv, _ = core_algos.get_adv_estimator_fn("gmc_loo")(token_level_rewards=batch.rewards,
                                                        response_mask=batch.mask.double(), index=batch.index)
    actor.global_batch_info.update(dp_size=1, global_batch_size=batch.B)
    rho = torch.rand(batch.B, 1, generator=torch.Generator().manual_seed(2), dtype=torch.float64) + 0.5
    call = {"old_log_prob": batch.old, "log_prob": batch.new, "advantages": adv, "response_mask": batch.mask,
            "config": actor}
    loss, _ = core_algos.get_policy_loss_fn("gmc")(**call, rollout_is_weights=rho * batch.mask)
    core = trajectory_loss("gmc", batch.new, batch.old, batch.mask, adv[:, 0] * rho[:, 0], G, actor.clip_ratio_high)
    assert abs(float(loss) - float(core.loss)) <= 1e-12
    token_level = rho * batch.mask * (1 + 0.1 * torch.arange(batch.mask.shape[1]))
    with pytest.raises(ValueError, match="rollout_is_weights varies along the tokens"):
        core_algos.get_policy_loss_fn("gmc")(**call, rollout_is_weights=token_level)
    with pytest.raises(ValueError, match="advantage varies along the tokens"):  # e.g. GAE
        core_algos.get_policy_loss_fn("gmc")(**{**call, "advantages": adv * token_level})


@pytest.mark.parametrize("scheme, knobs", [
    ("gmc_cap", {"kappa": 0.7}), ("vespo", {"k_pos": 1.0, "lambda_pos": 0.5, "k_neg": 0.5, "lambda_neg": 0.25}),
    ("seq_geo_mask", {"lo": 0.6, "hi": 1.8, "C": 1.5})])
def test_every_knob_set_under_policy_loss_reaches_the_loss(snippet_cfg, scheme, knobs):
    """gmc_cap, seq_geo_mask and vespo ran at their defaults whatever ``actor.policy_loss`` set (verl's
    PolicyLossConfig refused the keys), and seq_geo_mask with L = 1 whatever the response length: every
    knob set with ``+actor_rollout_ref.actor.policy_loss.<knob>`` now reaches the loss through verl's own
    config, and L is the micro-batch's response length."""
    cfg = verl_config(snippet_overrides() + [f"actor_rollout_ref.actor.policy_loss.loss_mode={scheme}"]
                      + [f"+actor_rollout_ref.actor.policy_loss.{k}={v}" for k, v in knobs.items()])
    actor = actor_config(cfg)
    assert {k: actor.policy_loss[k] for k in knobs} == knobs
    from verl.utils.config import omega_conf_to_dataclass  # verl's own conversion (validate_config, the workers)

    converted = omega_conf_to_dataclass(OmegaConf.create(OmegaConf.to_container(cfg.actor_rollout_ref.actor,
                                                                                  resolve=True)))
    assert {k: converted.policy_loss[k] for k in knobs} == knobs
    G, eps = cfg.actor_rollout_ref.rollout.n, cfg.actor_rollout_ref.actor.clip_ratio_high
    batch = random_batch(seed=12, prompts_per_step=4, G=G, spread=0.6, binary=False)
    batch.mask[:] = True  # every response has T tokens: L = T exactly
    T = batch.mask.shape[1]
    adv, _ = core_algos.get_adv_estimator_fn("gmc_loo")(token_level_rewards=batch.rewards,
                                                          response_mask=batch.mask.double(), index=batch.index,
                                                          config=instantiate(cfg.algorithm))
    A = adv[:, 0].reshape(-1, G)
    loss, _, _ = run_micro_batches(core_algos.get_policy_loss_fn(scheme), actor, batch, adv)
    length = {"length": float(T)} if scheme == "seq_geo_mask" else {}
    core = trajectory_loss(scheme, batch.new, batch.old, batch.mask, A, G, eps, **knobs, **length)
    default = trajectory_loss(scheme, batch.new, batch.old, batch.mask, A, G, eps)
    assert abs(float(loss) - float(core.loss)) <= 1e-12 and abs(float(core.loss) - float(default.loss)) > 1e-9

    batch.mask[0, -1] = False  # responses of two lengths: one L cannot be verl's per-response rule
    if scheme == "seq_geo_mask":
        with pytest.raises(ValueError, match="seq_geo_mask: its knob length"):
            run_micro_batches(core_algos.get_policy_loss_fn(scheme), actor, batch, adv)


def test_a_knob_the_loss_does_not_take_is_refused(snippet_cfg):
    """Where verl builds the policy-loss config (its __post_init__), and again where the loss reads it."""
    cfg = verl_config(snippet_overrides() + ["+actor_rollout_ref.actor.policy_loss.kappa=2.0"])  # loss_mode gmc
    refused = r"actor_rollout_ref.actor.policy_loss sets \['kappa'\], which loss_mode 'gmc' does not take"
    with pytest.raises(ValueError, match=refused):
        actor_config(cfg)
    # a config built some other way (a plain DictConfig, no dataclass): the loss refuses it itself
    actor = OmegaConf.create(OmegaConf.to_container(cfg.actor_rollout_ref.actor, resolve=True))
    del actor.policy_loss["_target_"]
    actor.global_batch_info = {}
    batch = random_batch(seed=13, prompts_per_step=2, G=cfg.actor_rollout_ref.rollout.n)
    adv, _ = core_algos.get_adv_estimator_fn("gmc_loo")(token_level_rewards=batch.rewards,
                                                          response_mask=batch.mask.double(), index=batch.index,
                                                          config=instantiate(cfg.algorithm))
    with pytest.raises(ValueError, match=refused):
        run_micro_batches(core_algos.get_policy_loss_fn("gmc"), actor, batch, adv)
