"""`ftis-node bench rollout`: generated tokens/s of each installed backend, and log-prob parity.

Every backend samples the same rendered prompts from the same checkpoint in one run. The
transformers backend runs twice, with a static and a dynamic KV cache, since which one is
faster on a CPU is a measurement, not a given. Parity is the max and mean |logp_gen -
token_logprobs| over every sampled token, the learner's chunked recomputation on the
same fp32 weights being the reference. vLLM runs last: its in-process engine lowers torch's
thread count for the whole process, which would slow whatever ran after it.
"""

from __future__ import annotations

import json
import os
import platform
import time
from dataclasses import asdict, dataclass
from typing import Any, Sequence

QUESTIONS = [
    "What is 7 + 5?", "What is 12 - 4?", "What is 6 * 3?", "What is 9 + 8?",
    "Tom has 3 apples and buys 4 more. How many apples does he have?", "What is 15 + 27?",
    "What is 100 - 37?", "A box holds 6 eggs. How many eggs are in 4 boxes?",
]


@dataclass(frozen=True)
class RolloutRow:
    """One backend's figures."""

    backend: str
    startup_s: float
    seconds: float
    tokens: int
    tokens_per_s: float
    max_abs_diff: float
    mean_abs_diff: float
    torch_threads: int


def bench_prompts(tokenizer: Any, n: int) -> list:
    """`n` short arithmetic questions rendered with the tokenizer's chat template (plain text without one)."""
    from ftis_swarm.rollout import PromptRequest

    out = []
    for i in range(n):
        q = QUESTIONS[i % len(QUESTIONS)]
        if getattr(tokenizer, "chat_template", None):
            ids = tokenizer.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True,
                                                return_dict=True)["input_ids"]
        else:
            ids = tokenizer(q)["input_ids"]
        out.append(PromptRequest("bench", f"bench/{i}", [int(t) for t in ids]))
    return out


def logprob_gap(model: Any, groups: Sequence[Any]) -> tuple[float, float]:
    """Max and mean |logp_gen - token_logprobs| over every completion token of `groups`."""
    import torch

    from ftis_swarm.core.logprobs import token_logprobs

    device = next(model.parameters()).device
    worst, total, count = 0.0, 0.0, 0
    for g in groups:
        prompt = [int(t) for t in g.prompt_ids]
        seqs = [prompt + [int(t) for t in c] for c in g.completion_ids]
        width = max(len(s) for s in seqs)
        ids = torch.zeros((len(seqs), width), dtype=torch.long)  # (G, L)
        mask = torch.zeros_like(ids)  # (G, L)
        for i, s in enumerate(seqs):
            ids[i, : len(s)] = torch.tensor(s)
            mask[i, : len(s)] = 1
        with torch.no_grad():
            ref = token_logprobs(model, ids.to(device), mask.to(device), temperature=g.temperature).cpu()  # (G, L-1)
        for i, c in enumerate(g.completion_ids):
            diff = (ref[i, len(prompt) - 1 : len(prompt) - 1 + len(c)] - torch.from_numpy(g.logp_gen[i])).abs()  # (n,)
            worst = max(worst, float(diff.max()))
            total += float(diff.sum())
            count += int(diff.numel())
    return worst, total / max(count, 1)


def _measure(name: str, backend: Any, startup: float, prompts: list, group_size: int, sampling: Any,
             reference: Any) -> RolloutRow:
    import torch

    backend.generate(prompts[:1], 2, sampling.model_copy(update={"max_new_tokens": 4}))  # warm-up
    t0 = time.perf_counter()
    groups = backend.generate(prompts, group_size, sampling)
    seconds = time.perf_counter() - t0
    tokens = sum(g.num_completion_tokens for g in groups)
    worst, mean = logprob_gap(reference, groups)
    return RolloutRow(name, round(startup, 2), round(seconds, 3), tokens, round(tokens / seconds, 1), worst, mean,
                      torch.get_num_threads())


def run_rollout_bench(
    model: str, *, backends: Sequence[str], prompts: int, group_size: int, max_new_tokens: int,
    temperature: float, seed: int, device: str = "cpu",
) -> list[RolloutRow]:
    """Measures each of `backends` ("transformers", "vllm") on `model`; the reference is a fp32 copy."""
    from ftis_swarm.config import SamplingConfig
    from ftis_swarm.models import load_model, resolve_model
    from ftis_swarm.rollout import GroupHeader, TransformersBackend, make_backend

    path = resolve_model(model)
    header = GroupHeader(run_id="bench", sender="bench", model_id=model)
    t0 = time.perf_counter()
    reference, tokenizer = load_model(path, dtype="fp32", device=device)
    load_s = time.perf_counter() - t0
    reqs = bench_prompts(tokenizer, prompts)
    sampling = SamplingConfig(temperature=temperature, max_new_tokens=max_new_tokens, group_size=group_size, seed=seed)
    rows = []
    if "transformers" in backends:
        for static in (True, False):
            backend = TransformersBackend(model=reference, tokenizer=tokenizer, header=header, static_cache=static)
            name = f"transformers ({'static' if static else 'dynamic'} cache)"
            rows.append(_measure(name, backend, load_s, reqs, group_size, sampling, reference))
    if "vllm" in backends:
        t0 = time.perf_counter()
        backend = make_backend("vllm", path, header=header, dtype="fp32")
        startup = time.perf_counter() - t0
        try:
            rows.append(_measure("vllm", backend, startup, reqs, group_size, sampling, reference))
        finally:
            backend.close()
    return rows


def format_table(rows: Sequence[RolloutRow], *, model: str, prompts: int, group_size: int, max_new_tokens: int) -> str:
    head = (f"rollout bench: {model}, {prompts} prompts x G={group_size}, up to {max_new_tokens} new tokens, fp32\n"
            f"{'backend':<30}{'start s':>9}{'gen s':>9}{'tokens':>8}{'tok/s':>9}{'max|dlogp|':>12}{'mean|dlogp|':>13}")
    lines = [head]
    for r in rows:
        lines.append(f"{r.backend:<30}{r.startup_s:>9.1f}{r.seconds:>9.2f}{r.tokens:>8d}{r.tokens_per_s:>9.1f}"
                     f"{r.max_abs_diff:>12.2e}{r.mean_abs_diff:>13.2e}")
    lines.append("parity: |logp_gen - token_logprobs| on the same fp32 weights (the learner's recomputation)")
    return "\n".join(lines)


def rows_as_json(rows: Sequence[RolloutRow], **settings: Any) -> str:
    import torch

    meta = {"torch": torch.__version__, "cpu_count": os.cpu_count(), "machine": platform.machine()}
    return json.dumps({"settings": settings, "meta": meta, "rows": [asdict(r) for r in rows]}, indent=2)
