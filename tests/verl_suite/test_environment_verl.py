"""The verl environment (.venv-verl): verl 0.9.1 with all its dependencies, uvicorn and fastapi,
no TRL, and pip finds no broken requirement."""
from __future__ import annotations

import importlib.metadata
import importlib.util
import subprocess
import sys


def test_pip_check_is_clean():
    res = subprocess.run([sys.executable, "-m", "pip", "check"], check=False, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr


def test_verl_with_its_engine_workers_and_without_trl():
    assert importlib.metadata.version("verl") == "0.9.1"
    assert importlib.metadata.version("torch").split("+")[0] == "2.13.0"
    # TRL 1.16 breaks verl's model build (verl/models/transformers/monkey_patch.py imports a class it dropped)
    assert importlib.util.find_spec("trl") is None, "TRL belongs in .venv"
    import verl.workers.engine_workers  # noqa: F401  (imports uvicorn and fastapi, which verl does not declare)


def test_the_toolkits_scoring_and_decoding_hold_under_this_environments_transformers():
    """The toolkit's log-probabilities and decode under the transformers verl installs (a release the lean forward
    was not checked against, which takes the KV cache as ``past_key_values``): a prompt run once per group and its
    cache repeated gives each row's log-probabilities as running every row whole does (float64: to 1e-12), and the
    decode with a cache is the decode that reruns the whole sequence each step."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from llm_runs.rollout import completion_logprobs, decode

    torch.manual_seed(0)
    cfg = Qwen3Config(vocab_size=15, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                      num_key_value_heads=1, head_dim=16, max_position_embeddings=64, pad_token_id=0, eos_token_id=1)
    model = Qwen3ForCausalLM(cfg).double().eval()
    prompts = torch.tensor([[0, 0, 3, 4, 5], [0, 6, 7, 8, 9]]).repeat_interleave(2, 0)
    mask = (prompts != 0).long()
    comp = torch.randint(2, 15, (4, 6), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        whole = completion_logprobs(model, prompts, mask, comp, 1.0, 1)
        grouped = completion_logprobs(model, prompts, mask, comp, 1.0, 2)
    assert float((whole - grouped).abs().max()) < 1e-12 * max(1.0, float(whole.abs().max()))

    class Tok:
        pad_token_id, eos_token_id = 0, 1

    model.generation_config.eos_token_id = 1
    out = decode(model, Tok(), prompts, mask, 4)
    ids, attn = prompts, mask
    for t in range(out.shape[1]):  # greedy by rerunning the whole sequence: no cache at all
        if t and bool((out[:, :t] == 1).any(1).all()):
            break
        pos = (attn.cumsum(-1) - 1).clamp(min=0)
        with torch.no_grad():
            nxt = model(input_ids=ids, attention_mask=attn, position_ids=pos, use_cache=False).logits[:, -1].argmax(-1)
        done = (out[:, :t] == 1).any(1) if t else torch.zeros(4, dtype=torch.bool)
        assert torch.equal(out[~done, t], nxt[~done]), t
        ids, attn = torch.cat([ids, out[:, t:t + 1]], 1), torch.cat([attn, torch.ones(4, 1, dtype=attn.dtype)], 1)
