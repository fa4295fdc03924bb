"""trm_k2 / trm_k3 keep exactly the sequences verl 0.9.1's seq_max_k2 / seq_max_k3 rejection mask keeps."""
import pytest
import torch
from verl.trainer.ppo.rollout_corr_helper import compute_rollout_rejection_mask

from estimators.losses import trm_keep_rows


@pytest.mark.parametrize("kind", ["k2", "k3"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_trm_keep_rows_equal_verl_seq_max(kind, seed):
    g = torch.Generator().manual_seed(seed)
    log_r = torch.randn(16, 7, generator=g, dtype=torch.float64) * 0.3
    log_r[0, 2] = 30.0  # beyond verl's safety clamp at 20
    mask = torch.ones(16, 7, dtype=torch.float64)
    mask[3, 4:] = 0
    mask[9, 1:] = 0
    for delta in (0.01, 0.05, 0.2):
        verl_mask, _ = compute_rollout_rejection_mask(log_r, mask, rollout_rs=f"seq_max_{kind}",
                                                      rollout_rs_threshold=delta)
        verl_keep = ((verl_mask * mask).sum(-1) == mask.sum(-1))
        ours = trm_keep_rows(log_r, mask > 0, kind, delta)
        assert torch.equal(ours, verl_keep), (kind, delta)
