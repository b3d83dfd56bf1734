"""GPU check of the rollout backends and one learner step, on one CUDA machine, offline, < 4 minutes.

    python tests/gpu/check_gpu.py                 # on a CUDA machine: the full check
    python tests/gpu/check_gpu.py --device cpu    # dry run here: the same steps, a tiny model

Steps: build a random Qwen2-shaped model from a config with the real Qwen tokenizer
(about 250M parameters on CUDA: the 151,936-row vocabulary, 8 layers of width 1024);
sample groups with the transformers backend on the device and time them; compare their
log-probs with the learner's `token_logprobs` on the device (the 1e-4 contract) and on a
CPU copy (parity with the CPU result); take one learner step (token_logprobs with grad,
`ftis_loss`, backward, AdamW) on the device and check the shared backend serves the new
weights; where vllm imports, start the vLLM backend on the same checkpoint, check its
parity against the CPU reference, reload the stepped weights into it and check again.
Prints one line per check and a JSON summary; exits 1 when a check fails. Not collected by
pytest (it is a script, and the gpu machines run it by hand: docs/rollout.md).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
import time
from pathlib import Path

SIZES = {
    "gpu": dict(hidden_size=1024, num_layers=8, num_heads=16, num_kv_heads=4, intermediate_size=2816),
    "tiny": dict(hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=1, intermediate_size=128),
}
SAME_DEVICE_TOL = 1e-4
CROSS_DEVICE_TOL = 1e-3


class Checks:
    """Collects named results; a failed one is reported and makes the exit status 1."""

    def __init__(self) -> None:
        self.results: dict[str, dict] = {}

    def record(self, name: str, ok: bool, **figures: float | int | str) -> None:
        self.results[name] = {"ok": bool(ok), **figures}
        shown = ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in figures.items())
        print(f"[{'ok' if ok else 'FAIL'}] {name}: {shown}", flush=True)

    @property
    def failed(self) -> list[str]:
        return [k for k, v in self.results.items() if not v["ok"]]


def prompts_for(tokenizer, n: int):
    from ftis_swarm.rollout import PromptRequest

    questions = ["What is 7 + 5?", "What is 12 - 4?", "Tom has 3 apples and buys 4 more. How many?", "What is 6 * 3?"]
    out = []
    for i in range(n):
        msgs = [{"role": "user", "content": questions[i % len(questions)]}]
        ids = tokenizer.apply_chat_template(msgs, add_generation_prompt=True, return_dict=True)["input_ids"]
        out.append(PromptRequest("gpucheck", f"gpucheck/{i}", [int(t) for t in ids]))
    return out


def batch_of(groups, device):
    """Right-padded ids, attention mask, completion mask and logp_gen of `groups`, in group order."""
    import torch

    seqs, starts, gens = [], [], []
    for g in groups:
        p = [int(t) for t in g.prompt_ids]
        for c, lp in zip(g.completion_ids, g.logp_gen):
            seqs.append(p + [int(t) for t in c])
            starts.append(len(p) - 1)
            gens.append(torch.from_numpy(lp))
    width = max(len(s) for s in seqs)
    ids = torch.zeros((len(seqs), width), dtype=torch.long)  # (N, L)
    attn = torch.zeros_like(ids)  # (N, L)
    mask = torch.zeros((len(seqs), width - 1))  # (N, L-1)
    logp_gen = torch.zeros((len(seqs), width - 1))  # (N, L-1)
    for i, (s, st, lp) in enumerate(zip(seqs, starts, gens)):
        ids[i, : len(s)] = torch.tensor(s)
        attn[i, : len(s)] = 1
        mask[i, st : st + len(lp)] = 1
        logp_gen[i, st : st + len(lp)] = lp
    return ids.to(device), attn.to(device), mask.to(device), logp_gen.to(device)


def parity(model, groups, temperature: float) -> float:
    """Max |logp_gen - token_logprobs(model)| over every completion token."""
    import torch

    from ftis_swarm.core.logprobs import token_logprobs

    device = next(model.parameters()).device
    ids, attn, mask, logp_gen = batch_of(groups, device)
    with torch.no_grad():
        ref = token_logprobs(model, ids, attn, target_mask=mask.bool(), temperature=temperature)  # (N, L-1)
    return float(((ref - logp_gen).abs() * mask).max())


def learner_step(model, groups, temperature: float) -> dict:
    """One F-TIS step on `groups` (own samples, random advantages): the loss, backward, AdamW."""
    import torch

    from ftis_swarm.config import FTISConfig
    from ftis_swarm.core.ftis import ftis_loss
    from ftis_swarm.core.logprobs import token_logprobs

    device = next(model.parameters()).device
    ids, attn, mask, logp_gen = batch_of(groups, device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    adv = torch.randn(ids.shape[0], generator=torch.Generator().manual_seed(0)).to(device)  # (N,)
    own = torch.zeros(ids.shape[0], dtype=torch.bool, device=device)  # (N,)
    model.train()
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    logp = token_logprobs(model, ids, attn, target_mask=mask.bool(), temperature=temperature)  # (N, L-1)
    loss, metrics = ftis_loss(logp, logp.detach(), logp_gen, adv, mask, own, FTISConfig())
    loss.backward()
    grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0))
    opt.step()
    opt.zero_grad(set_to_none=True)
    if device.type == "cuda":
        torch.cuda.synchronize()
    model.eval()
    peak = torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else 0.0
    return dict(loss=float(loss), grad_norm=grad_norm, seconds=time.perf_counter() - t0, peak_gib=peak,
                tokens=int(mask.sum()), mean_weight=metrics["mean_weight"])


def timed_generate(backend, prompts, G: int, sampling):
    import torch

    backend.generate(prompts[:1], 2, sampling.model_copy(update={"max_new_tokens": 4}))  # warm-up
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    groups = backend.generate(prompts, G, sampling)
    seconds = time.perf_counter() - t0
    tokens = sum(g.num_completion_tokens for g in groups)
    return groups, tokens, seconds


def run(args: argparse.Namespace) -> Checks:
    import torch
    from transformers import AutoModelForCausalLM

    from ftis_swarm.config import SamplingConfig
    from ftis_swarm.models import load_model
    from ftis_swarm.models.tiny import build_tiny_qwen2
    from ftis_swarm.rollout import GroupHeader, TransformersBackend

    checks = Checks()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda, but torch sees no CUDA device (use --device cpu for the dry run)")
    size = args.size or ("gpu" if device.type == "cuda" else "tiny")
    work = Path(tempfile.mkdtemp(prefix="ftis-gpucheck-"))
    t0 = time.perf_counter()
    model_dir = build_tiny_qwen2(work / "model", seed=0, max_position_embeddings=2048, **SIZES[size])
    cpu_model, tokenizer = load_model(str(model_dir), dtype="fp32", device="cpu")
    n_params = sum(p.numel() for p in cpu_model.parameters())
    checks.record("build", True, size=size, params_m=n_params / 1e6, seconds=time.perf_counter() - t0)

    header = GroupHeader(run_id="gpucheck", sender="gpucheck", model_id=f"qwen2-{size}")
    prompts = prompts_for(tokenizer, args.prompts)
    T = args.temperature
    sampling = SamplingConfig(temperature=T, max_new_tokens=args.max_new_tokens, seed=0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to(device).eval()
    backend = TransformersBackend(model=model, tokenizer=tokenizer, header=header)
    groups, tokens, seconds = timed_generate(backend, prompts, args.group_size, sampling)
    checks.record("transformers.throughput", tokens > 0, tokens=tokens, seconds=seconds, tokens_per_s=tokens / seconds)
    gap = parity(model, groups, T)
    checks.record("transformers.parity_same_device", gap < SAME_DEVICE_TOL, max_abs_diff=gap)
    gap_cpu = parity(cpu_model, groups, T)
    checks.record("transformers.parity_vs_cpu", gap_cpu < CROSS_DEVICE_TOL, max_abs_diff=gap_cpu)

    step = learner_step(model, groups, T)
    finite = all(torch.isfinite(p).all() for p in model.parameters())
    checks.record("learner.step", finite and step["grad_norm"] > 0, **step)
    backend.bump_policy_version()
    after, _, _ = timed_generate(backend, prompts, args.group_size, sampling)
    stale = parity(model, groups, T)
    fresh = parity(model, after, T)
    checks.record("transformers.serves_stepped_weights", fresh < SAME_DEVICE_TOL and stale > 10 * SAME_DEVICE_TOL,
                  fresh_max_abs_diff=fresh, stale_max_abs_diff=stale, policy_version=after[0].policy_version)

    if args.skip_vllm or importlib.util.find_spec("vllm") is None:
        checks.record("vllm", True, status="skipped" if args.skip_vllm else "not installed: skipped")
        return checks
    stepped_dir = work / "stepped"
    model.save_pretrained(stepped_dir)
    del backend
    from ftis_swarm.rollout import make_backend

    t0 = time.perf_counter()
    options: dict = dict(max_model_len=2048, enforce_eager=not args.vllm_compile)
    if args.vllm_attention:
        options["engine_options"] = {"attention_backend": args.vllm_attention}
    if device.type == "cuda":
        options["gpu_memory_utilization"] = args.vllm_memory
    vllm = make_backend("vllm", str(model_dir), header=header, dtype="fp32", **options)
    checks.record("vllm.startup", True, seconds=time.perf_counter() - t0)
    try:
        vgroups, vtokens, vseconds = timed_generate(vllm, prompts, args.group_size, sampling)
        checks.record("vllm.throughput", vtokens > 0, tokens=vtokens, seconds=vseconds, tokens_per_s=vtokens / vseconds)
        vgap = parity(cpu_model, vgroups, T)
        checks.record("vllm.parity_vs_cpu", vgap < CROSS_DEVICE_TOL, max_abs_diff=vgap)
        t0 = time.perf_counter()
        vllm.load_weights(str(stepped_dir))
        reload_s = time.perf_counter() - t0
        vafter, _, _ = timed_generate(vllm, prompts, args.group_size, sampling)
        vfresh = parity(model, vafter, T)
        checks.record("vllm.reload", vfresh < CROSS_DEVICE_TOL, seconds=reload_s, max_abs_diff_vs_stepped=vfresh)
    finally:
        vllm.close()
    return checks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--size", choices=sorted(SIZES), default=None, help="model size (default: gpu on cuda, tiny on cpu)")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--vllm-memory", type=float, default=0.35, help="vLLM's share of GPU memory")
    parser.add_argument("--vllm-compile", action="store_true", help="let vLLM compile and capture graphs (slower start)")
    parser.add_argument("--skip-vllm", action="store_true", help="leave the vLLM backend out")
    parser.add_argument("--vllm-attention", default=None, help="vLLM attention backend, e.g. FLEX_ATTENTION (default: vLLM's pick)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    checks = run(args)
    summary = {"device": args.device, "seconds": round(time.perf_counter() - t0, 1), "checks": checks.results}
    print(json.dumps(summary, indent=2))
    if args.json is not None:
        args.json.write_text(json.dumps(summary, indent=2))
    if checks.failed:
        print(f"FAILED: {', '.join(checks.failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
