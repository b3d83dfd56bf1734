"""Tiny Qwen2 fixtures: seeded, the real Qwen vocabulary, loadable through load_model."""

from __future__ import annotations

import torch

from ftis_swarm.models import load_model
from ftis_swarm.models.tiny import QWEN_VOCAB_SIZE, build_tiny_qwen2, qwen_tokenizer_dir
from ftis_swarm.wire import tokenizer_fingerprint


def test_tiny_model_has_the_qwen_vocabulary(tiny_qwen) -> None:
    from transformers import AutoTokenizer

    model, tok = load_model(str(tiny_qwen))
    assert len(tok) == 151669  # Qwen2.5's 151,665 ids plus Qwen3's four added tokens
    assert tok.convert_tokens_to_ids("<|im_end|>") == 151645 == tok.eos_token_id
    assert tokenizer_fingerprint(tok) == tokenizer_fingerprint(AutoTokenizer.from_pretrained(str(qwen_tokenizer_dir())))
    assert model.get_input_embeddings().num_embeddings == QWEN_VOCAB_SIZE
    assert model.config.num_hidden_layers == 2 and model.config.hidden_size == 64
    assert model.dtype == torch.float32 and not model.training
    assert "<|im_start|>assistant" in tok.apply_chat_template(
        [{"role": "user", "content": "1+1?"}], tokenize=False, add_generation_prompt=True
    )


def test_same_seed_same_weights_other_seed_other_weights(tiny_qwen, tmp_path) -> None:
    from safetensors.torch import load_file

    again = build_tiny_qwen2(tmp_path / "again", seed=0)
    other = build_tiny_qwen2(tmp_path / "other", seed=1)
    a, b, c = (load_file(str(p / "model.safetensors")) for p in (tiny_qwen, again, other))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["model.layers.0.self_attn.q_proj.weight"], c["model.layers.0.self_attn.q_proj.weight"])


def test_loads_in_bf16(tiny_qwen) -> None:
    model, _ = load_model(str(tiny_qwen), dtype="bf16")
    assert model.dtype == torch.bfloat16
    with torch.no_grad():
        logits = model(torch.tensor([[9707, 11]])).logits
    assert logits.shape == (1, 2, QWEN_VOCAB_SIZE) and torch.isfinite(logits).all()
