"""Rollout workers: prompts in, vertical groups with fp32 generation log-probs out.

- base.py          RolloutBackend (generate / load_weights / set_adapter / policy_version),
                   PromptRequest, GroupHeader, RolloutInputError and the shared prompt checks
- sampler.py       sample_rows: batched sampling loop over a transformers model (KV cache, fp32 log-probs)
- hf_backend.py    TransformersBackend: own model or a learner's model shared in-process
- vllm_backend.py  VLLMBackend: vLLM engine, in-place weight reload, LoRA swap (the one module importing vllm)
- weight_sync.py   InMemorySync: a generator's model copy follows the learner's, tensors copied in place
- factory.py       make_backend(kind, model, header=...): auto = vllm with CUDA, transformers otherwise

Imports below it: wire, models, core, config (never swarm, learner or node). Importing this
package does not import vllm.
"""

from ftis_swarm.rollout.base import GroupHeader, PromptRequest, RolloutBackend, RolloutInputError
from ftis_swarm.rollout.factory import make_backend
from ftis_swarm.rollout.hf_backend import TransformersBackend

__all__ = [
    "GroupHeader",
    "PromptRequest",
    "RolloutBackend",
    "RolloutInputError",
    "TransformersBackend",
    "make_backend",
]
