"""`ftis-node bench wire|learner|e2e`: benchmark commands (rollout and swarm live in main.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from ftis_swarm.cli.main import bench_app, fail


def _write_json(path: Optional[Path], data: dict) -> None:
    if path is not None:
        path.write_text(json.dumps(data, indent=2))
        typer.echo(f"written to {path}")


def _check_json_path(path: Optional[Path]) -> None:
    if path is not None and not path.parent.is_dir():
        fail(f"--json: folder {path.parent} does not exist")


@bench_app.command("wire")
def bench_wire(
    group_size: int = typer.Option(12, help="Completions per group, G."),
    tokens: int = typer.Option(512, help="Tokens per completion."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Also write the figures as JSON to this file."),
) -> None:
    """Encoded bytes per completion token, and encode/decode throughput against a memory copy."""
    if not 2 <= group_size <= 64 or not 1 <= tokens <= 8192:
        fail("--group-size must be 2 to 64 and --tokens 1 to 8192 (the wire limits)")
    _check_json_path(json_path)
    from ftis_swarm.bench.wire_bench import format_wire, run_wire_bench

    figures = run_wire_bench(G=group_size, tokens=tokens)
    typer.echo(format_wire(figures))
    _write_json(json_path, figures.as_dict())


@bench_app.command("learner")
def bench_learner(
    model: str = typer.Option("smollm2-135m", help="Model to step (short name, path or hub id)."),
    groups: int = typer.Option(2, help="Groups in the batch."),
    group_size: int = typer.Option(8, help="Completions per group, G."),
    prompt_tokens: int = typer.Option(48, help="Prompt length."),
    completion_tokens: int = typer.Option(32, help="Completion length."),
    repeats: int = typer.Option(5, help="Timed repeats per figure (median reported)."),
    threads: int = typer.Option(2, help="torch CPU threads."),
    memory: bool = typer.Option(True, "--memory/--no-memory", help="Also measure chunked vs naive log-probs at 150k vocabulary (needs ~11 GB)."),
    nproc: int = typer.Option(1, help="Above 1: the FSDP2 learner on this many ranks (torchrun) against one process instead."),
    micro_batch: int = typer.Option(4, help="Sequences per forward/backward (with --nproc)."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Also write the figures as JSON to this file."),
) -> None:
    """One F-TIS step vs one NoIS step, the loss alone, chunked vs naive log-probs, and TRL's GRPO loss;
    with --nproc N, the sharded learner's peak memory per rank and step time against one process."""
    if min(groups, group_size - 1, prompt_tokens, completion_tokens, repeats, threads, nproc, micro_batch) < 1:
        fail("--groups, --prompt-tokens, --completion-tokens, --repeats, --threads, --nproc, --micro-batch must be "
             ">= 1 and --group-size >= 2")
    _check_json_path(json_path)
    if nproc > 1:
        from ftis_swarm.bench.dist_bench import format_dist, run_dist_bench
        from ftis_swarm.models import ModelNotFoundError, resolve_model

        try:
            resolve_model(model)  # convert the embedded model once, before the measured processes
        except ModelNotFoundError as exc:
            fail(str(exc))
        try:
            dist = run_dist_bench(model=model, nproc=nproc, groups=groups, group_size=group_size,
                                  prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                                  micro_batch=micro_batch, repeats=repeats, threads=threads,
                                  progress=lambda s: typer.echo(f"  ... {s}", err=True))
        except RuntimeError as exc:
            fail(str(exc))
        typer.echo(format_dist(dist))
        _write_json(json_path, dist.as_dict())
        return
    from ftis_swarm.bench.learner_bench import format_learner, run_learner_bench
    from ftis_swarm.models import ModelNotFoundError

    try:
        figures = run_learner_bench(model_name=model, n_groups=groups, G=group_size, prompt_len=prompt_tokens,
                                    comp_len=completion_tokens, repeats=repeats, threads=threads, memory=memory,
                                    progress=lambda s: typer.echo(f"  ... {s}", err=True))
    except ModelNotFoundError as exc:
        fail(str(exc))
    typer.echo(format_learner(figures))
    _write_json(json_path, figures.as_dict())


@bench_app.command("e2e")
def bench_e2e(
    model: str = typer.Option("smollm2-135m", help="Model of every node."),
    rounds: int = typer.Option(4, help="Rounds per run (the first is left out of the medians)."),
    prompts: int = typer.Option(2, help="Groups each swarm node generates a round (the solo node makes twice as many)."),
    group_size: int = typer.Option(4, help="Completions per group, G."),
    max_new_tokens: int = typer.Option(24, help="Most tokens per completion."),
    deadline: float = typer.Option(1.0, help="Seconds each swarm node waits for peers' groups a round."),
    workdir: Path = typer.Option(Path("runs/bench-e2e"), help="Where the runs' directories go."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Also write the figures as JSON to this file."),
) -> None:
    """A round of a 2-node swarm against the same node alone doing the same work; bytes per round."""
    if rounds < 2 or prompts < 1 or group_size < 2 or max_new_tokens < 1 or deadline <= 0:
        fail("--rounds must be >= 2, --prompts >= 1, --group-size >= 2, --max-new-tokens >= 1, --deadline > 0")
    _check_json_path(json_path)
    import os

    if len(os.sched_getaffinity(0)) < 2:
        fail("the e2e bench pins each swarm node to its own core and needs at least 2 cores")
    from ftis_swarm.models import resolve_model
    from ftis_swarm.node.e2e import format_e2e, run_e2e

    resolve_model(model)  # convert the embedded model once, before the timed runs
    figures = run_e2e(workdir=workdir, model=model, prompts=prompts, G=group_size, tokens=max_new_tokens,
                      rounds=rounds, deadline=deadline, progress=lambda s: typer.echo(f"  ... {s}", err=True))
    typer.echo(format_e2e(figures))
    _write_json(json_path, figures.as_dict())
