"""The shapes of the Qwen2.5 family as data, so memory plans need neither the hub nor a download.

`ModelShape` is what a memory plan needs to know of a Llama-like decoder: widths, depth,
heads, vocabulary and whether the output head is tied to the embedding. The Qwen2.5 rows
are copied from the models' published `config.json` files (Coder and Math variants share
their size's shape; Instruct variants are the same networks); their parameter counts
(`ModelShape.params`) reproduce the published ones (1.54B, 3.09B, 7.62B, 14.7B, 32.8B). Any
other model is read from the `config.json` of a local checkpoint folder.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ModelShape:
    """A Llama-like decoder (Qwen2: biases on q, k and v; SwiGLU MLP; RMSNorm)."""

    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    tied: bool
    qkv_bias: bool = True

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def layer_params(self) -> int:
        """Parameters of one decoder layer: attention, MLP and two norms."""
        h, kv, inter = self.hidden, self.kv_dim, self.intermediate
        attention = 2 * h * h + 2 * h * kv + ((h + 2 * kv) if self.qkv_bias else 0)
        return attention + 3 * h * inter + 2 * h

    @property
    def root_params(self) -> int:
        """Parameters outside the decoder layers: embedding, final norm, and the head when untied."""
        return self.vocab * self.hidden * (1 if self.tied else 2) + self.hidden

    @property
    def params(self) -> int:
        return self.layers * self.layer_params + self.root_params

    def lora_params(self, rank: int, targets: tuple[str, ...]) -> int:
        """Parameters of a rank-`rank` LoRA adapter on the named projections of every layer."""
        h, kv, inter = self.hidden, self.kv_dim, self.intermediate
        dims = {"q_proj": (h, h), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (h, h),
                "gate_proj": (h, inter), "up_proj": (h, inter), "down_proj": (inter, h)}
        unknown = sorted(set(targets) - set(dims))
        if unknown:
            raise ValueError(f"no shape for LoRA target module {unknown[0]!r}")
        return self.layers * sum(rank * sum(dims[t]) for t in targets)


def _qwen(size: str, hidden: int, layers: int, heads: int, kv: int, inter: int, vocab: int, tied: bool) -> ModelShape:
    return ModelShape(f"Qwen2.5-{size}", hidden, layers, heads, kv, inter, vocab, tied)


QWEN25_SHAPES: dict[str, ModelShape] = {s.name.lower(): s for s in (
    _qwen("0.5B", 896, 24, 14, 2, 4864, 151936, True),
    _qwen("1.5B", 1536, 28, 12, 2, 8960, 151936, True),
    _qwen("3B", 2048, 36, 16, 2, 11008, 151936, True),
    _qwen("7B", 3584, 28, 28, 4, 18944, 152064, False),
    _qwen("14B", 5120, 48, 40, 8, 13824, 152064, False),
    _qwen("32B", 5120, 64, 40, 8, 27648, 152064, False),
    _qwen("72B", 8192, 80, 64, 8, 29568, 152064, False),
)}
"""Qwen2.5 base shapes by lower-cased name (`qwen2.5-7b`)."""


def shape_of(name: str) -> ModelShape:
    """The shape of a Qwen2.5 name (any variant: Instruct, Coder, Math; a `Qwen/` prefix) or a local folder."""
    key = name.strip().lower().removeprefix("qwen/")
    for variant in ("-instruct", "-coder", "-math"):
        key = key.replace(variant, "")
    if key in QWEN25_SHAPES:
        return QWEN25_SHAPES[key]
    config = Path(name).expanduser() / "config.json"
    if config.is_file():
        return shape_from_config(json.loads(config.read_text()), name=name)
    known = ", ".join(s.name for s in QWEN25_SHAPES.values())
    raise ValueError(f"no shape known for {name!r}: give a Qwen2.5 size ({known}) or a checkpoint folder with config.json")


def shape_from_config(cfg: dict, *, name: str) -> ModelShape:
    """A shape from a transformers `config.json` of a Llama-like model."""
    try:
        heads = int(cfg["num_attention_heads"])
        return ModelShape(name=name, hidden=int(cfg["hidden_size"]), layers=int(cfg["num_hidden_layers"]),
                          heads=heads, kv_heads=int(cfg.get("num_key_value_heads", heads)),
                          intermediate=int(cfg["intermediate_size"]), vocab=int(cfg["vocab_size"]),
                          tied=bool(cfg.get("tie_word_embeddings", False)),
                          qkv_bias=bool(cfg.get("attention_bias", cfg.get("model_type") == "qwen2")))
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"config of {name!r} lacks a Llama-like shape field: {exc}") from None
