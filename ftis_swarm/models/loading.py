"""Loading a resolved model and its tokenizer, with failures turned into one sentence.

transformers reports a missing or unreachable checkpoint as an `OSError` several lines
long (and on machines without the hub, after trying it); a node's user needs the name they
typed and the reason, so both loaders re-raise those as `ModelNotFoundError`. A hub id
is checked first (`hub.loadable_model`): one not cached on a machine that cannot reach
the hub fails in seconds, and a cached one there loads from its cached folder.
"""

from __future__ import annotations

from typing import Any

from ftis_swarm.models.hub import loadable_model
from ftis_swarm.models.logit_bias import attach_logit_bias
from ftis_swarm.models.quiet import no_progress_bars
from ftis_swarm.models.registry import ModelNotFoundError

DTYPES = ("fp32", "bf16", "fp16")


def _first_sentence(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text.split(". ")[0].rstrip(".")


def torch_dtype(dtype: str) -> Any:
    """The torch dtype of our names fp32 / bf16 / fp16."""
    import torch

    table = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    if dtype not in table:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    return table[dtype]


def load_tokenizer(name: str) -> Any:
    """The tokenizer of model `name` (short name, folder, or hub id)."""
    return _tokenizer_at(loadable_model(name), name)


def _tokenizer_at(path: str, name: str) -> Any:
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as exc:
        raise ModelNotFoundError(f"could not load the tokenizer of {name!r} from {path}: {_first_sentence(exc)}") from exc


def load_model(name: str, *, dtype: str = "fp32", device: str = "cpu") -> tuple[Any, Any]:
    """`(model, tokenizer)` for `name`: a causal LM in `dtype` on `device`, in eval mode (with its
    logit bias hooked on when its config has one, `logit_bias.attach_logit_bias`)."""
    from transformers import AutoModelForCausalLM

    torch_type = torch_dtype(dtype)
    path = loadable_model(name)
    tokenizer = _tokenizer_at(path, name)
    try:
        with no_progress_bars():
            model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_type)
    except (OSError, ValueError) as exc:
        raise ModelNotFoundError(f"could not load model {name!r} from {path}: {_first_sentence(exc)}") from exc
    attach_logit_bias(model)  # a `smollm2-bias<sigma>` checkpoint: its head adds the fixed bias
    return model.to(device).eval(), tokenizer
