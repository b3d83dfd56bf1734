"""`ftis-node bench pilot`: the experiment's pilot gate for learner B (ftis_swarm.lab.experiment.pilot).

With `--sigmas`, the pre-registered design's pilot instead (`lab.experiment.sigma_pilot`): the
sweep of B = `smollm2-bias<sigma>` on train prompts of a seed no run uses, its choice rule
and gate.

Flags are checked (ranges by typer's `min=`/`max=`; one sentence, exit 2) before torch is
imported; then the pilot's table is printed and its figures, per item included, written to `--json`.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import typer

from ftis_swarm.cli.app import fail
from ftis_swarm.cli.lab.bench import bench_app, check_json_path, write_json


@bench_app.command("pilot")
def bench_pilot(
    candidates: str = typer.Option("smollm2-slim,smollm2-slim27,smollm2-slim26",
                                   help="Comma-separated models for learner B (at most 3; same tokenizer as A)."),
    model_a: str = typer.Option("smollm2-135m", help="Learner A's model."),
    task: str = typer.Option("arith_mix", help="Task whose every held-out item is evaluated (needs a fixed test split)."),
    samples: int = typer.Option(16, min=2, help="Sampled completions an item (sampled accuracy; the weights are measured on them)."),
    temperature: Optional[float] = typer.Option(None, min=0.05, max=10, help="Sampling temperature [default: the experiment's]."),
    max_new_tokens: Optional[int] = typer.Option(None, min=1, help="Most tokens per answer [default: the experiment's]."),
    seed: int = typer.Option(0, min=0, help="Seed of the item order and of sampling."),
    threads: int = typer.Option(1, min=1, help="torch threads."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Write every figure (per item too) here."),
    sigmas: Optional[str] = typer.Option(None, help="Sweep B = smollm2-bias<sigma> over these comma-separated scales (e.g. 1,1.5,2,2.5,3) instead of --candidates: the pre-registered design's pilot."),
    prompts: int = typer.Option(24, min=2, help="With --sigmas: train prompts (drawn with --seed, 1000 by default there)."),
    group_size: int = typer.Option(6, min=2, help="With --sigmas: B's completions a prompt."),
) -> None:
    """Pilot gate: A's and each candidate B's accuracy, and the F-TIS weights of each one's samples under the other."""
    from ftis_swarm.models import check_model_name
    from ftis_swarm.tasks import get_task

    if sigmas is not None:
        _sigma_pilot(sigmas, model_a=model_a, task=task, temperature=temperature, max_new_tokens=max_new_tokens,
                     seed=seed or None, threads=threads, json_path=json_path, prompts=prompts, group_size=group_size)
        return
    names = [c.strip() for c in candidates.split(",") if c.strip()]
    if not 1 <= len(names) <= 3:
        fail(f"--candidates needs 1 to 3 models, got {len(names)}")
    for name in [model_a, *names]:
        check_model_name(name)
    if not get_task(task).size("test"):
        fail(f"task {task} has no fixed held-out set (its test split is an endless stream); use arith_mix")
    check_json_path(json_path)

    from ftis_swarm.lab.experiment.pilot import pilot_table, run_pilot

    result = run_pilot(names, model_a=model_a, task_name=task, samples=samples, seed=seed,
                       **_sampling(threads, temperature, max_new_tokens))
    result["threads"] = threads
    s = result["settings"]
    typer.echo(f"pilot on {result['items']} held-out items of {task}: {s['samples']} samples an item at "
               f"T = {s['temperature']}, {s['max_new_tokens']} tokens; {result['seconds']:.0f} s with {threads} thread(s)")
    typer.echo(pilot_table(result))
    write_json(json_path, result)


def _sampling(threads: int, temperature: Optional[float], max_new_tokens: Optional[int]) -> dict:
    """torch's threads set; the sampling keywords of a pilot (the experiment's defaults where unset) and its progress."""
    import torch

    from ftis_swarm.lab.experiment.config import ExperimentConfig

    torch.set_num_threads(threads)
    defaults = ExperimentConfig().node.sampling
    t0 = time.perf_counter()
    return {"temperature": defaults.temperature if temperature is None else temperature,
            "max_new_tokens": defaults.max_new_tokens if max_new_tokens is None else max_new_tokens,
            "progress": lambda step: typer.echo(f"  ... {step} ({time.perf_counter() - t0:.0f} s)", err=True)}


def _sigma_pilot(sigmas: str, *, model_a: str, task: str, temperature: Optional[float],
                 max_new_tokens: Optional[int], seed: Optional[int], threads: int, json_path: Optional[Path],
                 prompts: int, group_size: int) -> None:
    """`bench pilot --sigmas`: the sweep, its table and choice, and its JSON."""
    from ftis_swarm.models import check_model_name
    from ftis_swarm.models.logit_bias import bias_name

    try:
        values = [float(x) for x in sigmas.split(",") if x.strip()]
    except ValueError:
        fail(f"--sigmas needs comma-separated numbers, got {sigmas!r}")
    if not 1 <= len(values) <= 8:
        fail(f"--sigmas needs 1 to 8 scales, got {len(values)}")
    for name in [model_a, *map(bias_name, values)]:
        check_model_name(name)
    check_json_path(json_path)

    from ftis_swarm.lab.experiment.sigma_pilot import PILOT_SEED, run_sigma_pilot, sigma_table

    result = run_sigma_pilot(values, model_a=model_a, task_name=task, prompts=prompts, group_size=group_size,
                             seed=PILOT_SEED if seed is None else seed, **_sampling(threads, temperature, max_new_tokens))
    result["threads"] = threads
    s = result["settings"]
    typer.echo(f"sigma pilot on {s['prompts']} train prompts of {task} (seed {s['seed']}), {s['group_size']} samples "
               f"a prompt at T = {s['temperature']}, {s['max_new_tokens']} tokens, C = {s['C']}; "
               f"{result['seconds']:.0f} s with {threads} thread(s)")
    typer.echo(sigma_table(result))
    write_json(json_path, result)
