"""A peer with a dial: SmolLM2 with a fixed random logit bias of scale sigma, `smollm2-bias<sigma>`.

The experiment needs a learner B whose samples are off-policy for A by a set amount
(docs/experiment.md, issue 29): dropping layers gave one fixed distance (ESS 0.56 for
`smollm2-slim27`), dividing A's logits made gibberish. Adding to every logit a fixed bias
`sigma * n_v`, `n_v ~ N(0, 1)` drawn once per vocabulary entry from a seeded generator,
moves the distribution by a dial while leaving the arithmetic alone: digits, EOS and the
tokenizer's special tokens get no bias, so the answer's tokens and the stop keep A's odds.

The bias lives in the model, not in a sampler: the checkpoint's `config.json` carries
`logit_bias_sigma`, `logit_bias_seed` and the exempt token ids (`logit_bias_exempt`), and
`attach_logit_bias` (called by `loading.load_model` on every model it loads) adds the bias
in a forward hook on the output head. The rollout's decoding loop (`model(...).logits`) and
the learner's log-probs (`core.logprobs`, which runs the head chunk by chunk) both call that
head, so generation, `logp_gen` and the learner's `logp_old` and `logp` all see the same
biased logits, and a checkpoint the node saves (`save_pretrained`) keeps the keys, so it
reloads biased. The weights are SmolLM2's, linked, not copied. vLLM loads weights itself and
never runs the hook, so its backend refuses such a model (`rollout.vllm_backend`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

SIGMA_KEY, SEED_KEY, EXEMPT_KEY = "logit_bias_sigma", "logit_bias_seed", "logit_bias_exempt"
BIAS_SEED = 0
"""Seed of the bias draw of every `smollm2-bias<sigma>`: one fixed bias shape, scaled by sigma."""
SIGMA_MAX = 10.0
NAME = re.compile(r"^smollm2-bias(\d+(?:\.\d+)?)$")
"""`smollm2-bias<sigma>`, sigma a decimal in (0, SIGMA_MAX]: `smollm2-bias2`, `smollm2-bias1.5`."""


def parse_bias_name(name: str) -> float | None:
    """Sigma of a `smollm2-bias<sigma>` name, None for any other name; ValueError for a sigma out of range."""
    m = NAME.match(name.strip().lower())
    if not m:
        return None
    sigma = float(m.group(1))
    if not 0 < sigma <= SIGMA_MAX:
        raise ValueError(f"the logit bias scale in {name!r} must be in (0, {SIGMA_MAX:g}], got {sigma:g}")
    return sigma


def bias_name(sigma: float) -> str:
    """The short name of the biased SmolLM2 of scale `sigma` (`bias_name(2.0) == "smollm2-bias2"`)."""
    return f"smollm2-bias{sigma:g}"


def exempt_token_ids(tokenizer: Any) -> list[int]:
    """Ids left unbiased: every token that decodes to digits only (spaces aside), EOS, and the special tokens."""
    digits = [i for i in range(len(tokenizer)) if (text := tokenizer.decode([i]).strip()) and text.isascii()
              and text.isdigit()]
    special = list(tokenizer.all_special_ids) + [t for t in (tokenizer.eos_token_id,) if t is not None]
    return sorted(set(digits) | set(special))


def bias_vector(vocab_size: int, sigma: float, seed: int, exempt: list[int]) -> Any:
    """`(vocab_size,)` float32 on the CPU: `sigma * N(0, 1)` from a generator seeded `seed`, 0 at `exempt`."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    bias = torch.randn(vocab_size, generator=gen, dtype=torch.float32) * sigma  # (V,)
    if exempt:
        bias[torch.tensor(exempt, dtype=torch.long)] = 0.0  # (V,)
    return bias


def attach_logit_bias(model: Any) -> bool:
    """Adds the checkpoint's logit bias to `model`'s output head in a forward hook; False when it has none.

    The bias is made once from the config's sigma, seed and exempt ids (never stored as a
    weight, so state dicts and optimisers are SmolLM2's), and kept per device and dtype.
    """
    config = model.config
    sigma = float(getattr(config, SIGMA_KEY, 0.0) or 0.0)
    if sigma <= 0:
        return False
    head = model.get_output_embeddings()
    base = bias_vector(head.weight.shape[0], sigma, int(getattr(config, SEED_KEY, BIAS_SEED)),
                       list(getattr(config, EXEMPT_KEY, [])))  # (V,)
    placed: dict[tuple[Any, Any], Any] = {}

    def add_bias(_module: Any, _inputs: Any, logits: Any) -> Any:
        key = (logits.device, logits.dtype)
        if key not in placed:
            placed[key] = base.to(device=logits.device, dtype=logits.dtype)  # (V,)
        return logits + placed[key]  # (..., V)

    head.register_forward_hook(add_bias)
    return True


def has_logit_bias(config: Any) -> bool:
    """Whether a transformers config (or its dict) asks for a logit bias."""
    value = config.get(SIGMA_KEY) if isinstance(config, dict) else getattr(config, SIGMA_KEY, None)
    return bool(value)


def build_biased(src: Path, out: Path, sigma: float, *, seed: int = BIAS_SEED) -> None:
    """Writes to `out` the checkpoint `src` with the bias keys in its config: weights linked, the rest copied."""
    from transformers import AutoTokenizer

    for f in src.iterdir():
        if f.name == "config.json" or not f.is_file():
            continue
        if f.suffix in (".safetensors", ".bin"):
            os.symlink(f.resolve(), out / f.name)
        else:
            shutil.copy2(f, out / f.name)
    config = json.loads((src / "config.json").read_text())
    config.update({SIGMA_KEY: sigma, SEED_KEY: seed,
                   EXEMPT_KEY: exempt_token_ids(AutoTokenizer.from_pretrained(src))})
    (out / "config.json").write_text(json.dumps(config, indent=2))
