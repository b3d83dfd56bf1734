"""Loading a resolved model and its tokenizer, with failures turned into one sentence.

transformers reports a missing or unreachable checkpoint as an `OSError` several lines
long (and on machines without the hub, after trying it); a node's user needs the name they
typed and the reason, so both loaders re-raise those as `ModelNotFoundError`. A hub id
is checked first (`hub.loadable_model`): one not cached on a machine that cannot reach
the hub fails in seconds, and a cached one there loads from its cached folder.

A hub id loads under a deadline (`hub.hub_deadline`: `hub_timeout` seconds, or the one a
caller set around it): a hub that accepts connections and then says nothing ends the load
after that long, with `hub.HubSilentError`, or, when the model is in the hub cache, with a
WARNING and the cached copy.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Optional, TypeVar

from ftis_swarm.models.hub import HubWatch, cached_folder, hub_deadline, loadable_model
from ftis_swarm.models.logit_bias import attach_logit_bias
from ftis_swarm.models.quiet import no_progress_bars
from ftis_swarm.models.registry import ModelNotFoundError, hub_id_of

DTYPES = ("fp32", "bf16", "fp16")
logger = logging.getLogger(__name__)
T = TypeVar("T")


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


def load_tokenizer(name: str, *, hub_timeout: Optional[float] = None) -> Any:
    """The tokenizer of model `name` (short name, folder, or hub id); `hub_timeout`: see the module docstring."""
    with hub_deadline(hub_timeout) as watch:
        return _loaded(name, f"the tokenizer of {name!r}", watch, lambda path: _tokenizer_at(path, name))


def _tokenizer_at(path: str, name: str) -> Any:
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as exc:
        raise ModelNotFoundError(f"could not load the tokenizer of {name!r} from {path}: {_first_sentence(exc)}") from exc


def load_model(name: str, *, dtype: str = "fp32", device: str = "cpu",
               hub_timeout: Optional[float] = None) -> tuple[Any, Any]:
    """`(model, tokenizer)` for `name`: a causal LM in `dtype` on `device`, in eval mode (with its
    logit bias hooked on when its config has one, `logit_bias.attach_logit_bias`); `hub_timeout`: see
    the module docstring."""
    torch_type = torch_dtype(dtype)
    with hub_deadline(hub_timeout) as watch:
        model, tokenizer = _loaded(name, f"model {name!r}", watch, lambda path: _model_at(path, name, torch_type))
    attach_logit_bias(model)  # a `smollm2-bias<sigma>` checkpoint: its head adds the fixed bias
    return model.to(device).eval(), tokenizer


def _model_at(path: str, name: str, torch_type: Any) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM

    tokenizer = _tokenizer_at(path, name)
    try:
        with no_progress_bars():
            model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_type)
    except (OSError, ValueError) as exc:
        raise ModelNotFoundError(f"could not load model {name!r} from {path}: {_first_sentence(exc)}") from exc
    return model, tokenizer


def _loaded(name: str, what: str, watch: HubWatch, load: Callable[[str], T]) -> T:
    """`load(path)` of where `name` loads from; a hub that went silent meanwhile: the cached copy, else one sentence."""
    path = loadable_model(name)
    hub_id = hub_id_of(name)
    if hub_id is None or path != hub_id:  # a folder (ours, the user's, or the hub cache's): no request to the hub
        return load(path)
    from huggingface_hub import constants

    logger.info("loading %s from the hub at %s (deadline %g s for each answer)...", hub_id, constants.ENDPOINT,
                watch.seconds)
    try:
        return load(path)
    except Exception as exc:  # whatever transformers made of the silence; any other failure goes on unchanged
        if watch.silent is None:
            raise
        cached = cached_folder(hub_id)
        if cached is None:
            raise watch.model_error(what, hub_id) from exc
        logger.warning("%s; loading %s from the hub cache", watch.silence(), hub_id)
    return load(cached)
