"""Rollout workers: prompts in, vertical groups with fp32 generation log-probs out.

- base.py          RolloutBackend (generate / greedy / load_weights / set_adapter / policy_version /
                   context_len), PromptRequest, GroupHeader, RolloutInputError, the shared prompt
                   checks, and greedy_texts (the evaluation's decode: `ftis-node eval`, the experiment)
- sampler.py       sample_rows and greedy_rows: one batched decoding loop over a transformers model
                   (KV cache, fp32 log-probs), drawing or taking the argmax
- hf_backend.py    TransformersBackend: own model or a learner's model shared in-process
- vllm_backend.py  VLLMBackend: vLLM engine, in-place weight reload, LoRA swap (the one module importing vllm)
- process_backend.py ProcessBackend: a TransformersBackend in a child process sampling from weights in
                   shared memory (generation ahead of learning on CPU, without the GIL between them)
- weight_sync.py   InMemorySync: a generator's model copy follows the learner's, tensors copied in place
- factory.py       make_backend(kind, model, header=...): auto = vllm with CUDA, transformers otherwise

Imports below it: wire, models, core, config (never swarm, learner or node); torch,
transformers, peft and safetensors. vllm only in vllm_backend.py, which `make_backend` imports
lazily: importing this package does not import vllm.
"""

from ftis_swarm.rollout.base import GroupHeader, PromptRequest, RolloutBackend, RolloutInputError, greedy_texts
from ftis_swarm.rollout.factory import make_backend
from ftis_swarm.rollout.hf_backend import TransformersBackend

__all__ = [
    "GroupHeader",
    "PromptRequest",
    "RolloutBackend",
    "RolloutInputError",
    "TransformersBackend",
    "greedy_texts",
    "make_backend",
]
