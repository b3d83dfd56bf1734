"""Runs a node for `ftis-node join`: logging, the live table, errors as one sentence, and torchrun.

Under torchrun with several processes rank 0 runs the node and the others follow its learner
(`node/ranks.py`); `join --nproc-per-node N` starts torchrun itself (`torchrun_argv`).
"""

from __future__ import annotations

import logging
import sys

import typer

from ftis_swarm.cli.main import fail
from ftis_swarm.config import NodeConfig

TABLE_COLUMNS = ("round", "reward", "accuracy", "peer_groups", "frac_filtered", "frac_truncated", "loss",
                 "time_generate", "time_gather", "time_learn")


def setup_logging(cfg: NodeConfig, *, rank: int = 0) -> None:
    cfg.run_dir.mkdir(parents=True, exist_ok=True)
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    root = logging.getLogger()
    root.setLevel(logging.INFO)
    file_handler = logging.FileHandler(cfg.run_dir / ("node.log" if rank == 0 else f"node-rank{rank}.log"))
    file_handler.setFormatter(fmt)
    root.addHandler(file_handler)
    console = logging.StreamHandler(sys.stderr)
    console.setFormatter(fmt)
    console.setLevel(logging.WARNING)
    root.addHandler(console)
    for noisy in ("hivemind", "httpx", "transformers", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # weight loading and checkpoint writes: not per-round news


def torchrun_argv(argv: list[str], nproc: int) -> list[str]:
    """The command that reruns `ftis-node join` (argv without --nproc-per-node) under torchrun."""
    rest, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--nproc-per-node":
            skip = True
        elif not arg.startswith("--nproc-per-node="):
            rest.append(arg)
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
            "-m", "ftis_swarm.cli", *rest]


def format_cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def run_node(cfg: NodeConfig, *, table: bool) -> None:
    from ftis_swarm.learner.checkpoint import CheckpointError
    from ftis_swarm.models import ModelNotFoundError
    from ftis_swarm.node.daemon import Node, RoundResult
    from ftis_swarm.node.ranks import join_ranks, launched_with_ranks, run_follower
    from ftis_swarm.swarm import SwarmError
    from ftis_swarm.tasks import UnknownTaskError

    ranks = join_ranks() if launched_with_ranks() else None
    setup_logging(cfg, rank=ranks.rank if ranks else 0)
    if ranks is not None and not ranks.leader:
        run_follower(cfg, ranks)
        return
    try:
        node = Node(cfg, ranks=ranks)
    except (ModelNotFoundError, UnknownTaskError, SwarmError, CheckpointError, FileNotFoundError) as exc:
        fail(str(exc))
    node.install_signal_handlers()
    typer.echo(f"peer id {node.parts.swarm.peer_id}")
    for maddr in node.parts.swarm.visible_maddrs:
        typer.echo(f"listening on {maddr}")
    typer.echo(f"run directory {cfg.run_dir}; starting at round {node.state.start_round} of {cfg.rounds}")

    live = None
    if table and sys.stdout.isatty():
        from rich.live import Live
        from rich.table import Table

        grid = Table(*TABLE_COLUMNS, title=f"ftis-node {cfg.model}")
        live = Live(grid, refresh_per_second=2)
        live.start()

    def on_round(res: RoundResult) -> None:
        cells = [format_cell(res.record.get(c)) for c in TABLE_COLUMNS]
        if live is not None:
            live.renderable.add_row(*cells)
        else:
            typer.echo("  ".join(f"{c}={v}" for c, v in zip(TABLE_COLUMNS, cells)))

    try:
        results = node.run(on_round=on_round)
    finally:
        if live is not None:
            live.stop()
    typer.echo(f"done: {len(results)} rounds this run; metrics in {cfg.run_dir / 'metrics.jsonl'}")
