"""The embedded default (GGUF converted once) and its sibling with layers dropped. Slow: ~1.5 min."""

from __future__ import annotations

import pytest
import torch

from ftis_swarm.models import load_model, resolve_model
from ftis_swarm.models.smollm2 import GGUF_FILE, MINI_LAYERS, SIBLINGS, SLIM_LAYERS, embedded_gguf
from ftis_swarm.wire import tokenizer_fingerprint

pytestmark = pytest.mark.slow
PROMPT = [{"role": "user", "content": "What is 3 + 4?"}]


def test_conversion_is_a_plain_checkpoint_equal_to_the_gguf(smollm2_cache) -> None:
    from transformers import AutoTokenizer

    cache, converted = smollm2_cache
    assert converted == cache / "models" / "smollm2-135m-instruct-v1"
    assert resolve_model("smollm2-135m") == str(converted)  # reused: no second conversion
    model, tok = load_model("smollm2-135m")
    assert "quantization_config" not in model.config.to_dict()
    assert model.config.num_hidden_layers == 30 and sum(p.numel() for p in model.parameters()) == 134_515_008
    gguf = embedded_gguf()
    gguf_tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=GGUF_FILE)
    assert tokenizer_fingerprint(tok) == tokenizer_fingerprint(gguf_tok)
    assert tok.apply_chat_template(PROMPT, tokenize=False, add_generation_prompt=True) == gguf_tok.apply_chat_template(
        PROMPT, tokenize=False, add_generation_prompt=True
    )
    assert tok.eos_token == "<|im_end|>"
    _assert_weights_equal_the_gguf(model.state_dict(), n_heads=9, n_kv_heads=3)
    ids = tok.apply_chat_template(PROMPT, add_generation_prompt=True, return_dict=True)["input_ids"]
    out = model.generate(torch.tensor([ids]), max_new_tokens=8, do_sample=False)
    assert "7" in tok.decode(out[0, len(ids) :])  # the default model does answer this one


def _unpermute(w: torch.Tensor, n_heads: int) -> torch.Tensor:
    """llama.cpp stores q/k rows interleaved per head for its rotary layout; undo that."""
    half = w.shape[0] // n_heads // 2
    return w.reshape(n_heads, half, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _assert_weights_equal_the_gguf(state: dict, *, n_heads: int, n_kv_heads: int) -> None:
    """Compares with the gguf package's own dequantisation (independent of transformers' loader)."""
    from gguf import GGUFReader
    from gguf.quants import dequantize

    tensors = {t.name: t for t in GGUFReader(str(embedded_gguf())).tensors}

    def gguf(name: str) -> torch.Tensor:
        t = tensors[name]
        return torch.from_numpy(dequantize(t.data, t.tensor_type).copy())

    pairs = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight"}
    for i in (0, 29):
        pairs.update({
            f"blk.{i}.ffn_down.weight": f"model.layers.{i}.mlp.down_proj.weight",
            f"blk.{i}.ffn_gate.weight": f"model.layers.{i}.mlp.gate_proj.weight",
            f"blk.{i}.attn_v.weight": f"model.layers.{i}.self_attn.v_proj.weight",
            f"blk.{i}.attn_output.weight": f"model.layers.{i}.self_attn.o_proj.weight",
            f"blk.{i}.attn_norm.weight": f"model.layers.{i}.input_layernorm.weight",
        })
    for g_name, hf_name in pairs.items():
        assert torch.equal(state[hf_name], gguf(g_name)), hf_name
    assert torch.equal(state["model.layers.7.self_attn.q_proj.weight"], _unpermute(gguf("blk.7.attn_q.weight"), n_heads))
    assert torch.equal(state["model.layers.7.self_attn.k_proj.weight"], _unpermute(gguf("blk.7.attn_k.weight"), n_kv_heads))


@pytest.mark.parametrize("name, keep, params", [("smollm2-mini", MINI_LAYERS, 113_274_432),
                                                 ("smollm2-slim", SLIM_LAYERS, 127_434_816),
                                                 ("smollm2-slim27", SIBLINGS["smollm2-slim27"], 123_894_720),
                                                 ("smollm2-slim26", SIBLINGS["smollm2-slim26"], 120_354_624)])
def test_sibling_keeps_the_chosen_layers_and_the_tokenizer(smollm2_cache, name, keep, params) -> None:
    from safetensors.torch import load_file

    cache, converted = smollm2_cache
    mini_dir = resolve_model(name)
    assert mini_dir == str(cache / "models" / f"{name}-v1")
    mini, mini_tok = load_model(name)
    _, tok = load_model(str(converted))
    assert tokenizer_fingerprint(mini_tok) == tokenizer_fingerprint(tok)
    assert mini.config.num_hidden_layers == len(keep)
    src = load_file(str(converted / "model.safetensors"))
    got = mini.state_dict()
    for new_idx, old_idx in enumerate(keep):
        for suffix in ("self_attn.q_proj.weight", "mlp.down_proj.weight", "input_layernorm.weight"):
            assert torch.equal(got[f"model.layers.{new_idx}.{suffix}"], src[f"model.layers.{old_idx}.{suffix}"])
    assert torch.equal(got["model.embed_tokens.weight"], src["model.embed_tokens.weight"])
    assert torch.equal(got["model.norm.weight"], src["model.norm.weight"])
    assert sum(p.numel() for p in mini.parameters()) == params
