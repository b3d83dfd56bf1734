"""Runs a node for `ftis-node join`: machine checks, logging, the live table, the closing summary, torchrun.

Order matters: the config is already valid (node_cmds.join), then the peers file and the
ports are checked, and only then is the run directory made and the model loaded, so a
mistake leaves nothing behind. The first line of output comes before the model loads.

Under torchrun with several processes rank 0 runs the node and the others follow its learner
(`node/ranks.py`); `join --nproc-per-node N` starts torchrun itself (`torchrun_argv`).

Every network wait of the start has a deadline, logged at INFO as it begins, and ends in one
sentence and exit 2 when it passes: the hub's answers (`hub_timeout`, models/hub.py) and the
bootstrap dial and DHT join (`swarm.transport.join_timeout`, swarm/peer/start.py).

Exit status: 0 at the last round or after SIGTERM/SIGINT, 2 for a user error, 3 when the
node stopped because its updates kept failing (node/health.py).
"""

from __future__ import annotations

import logging
import os
import shlex
import sys
from collections import deque
from typing import TYPE_CHECKING

import typer

from ftis_swarm.cli.app import setup_logging
from ftis_swarm.cli.live import round_line, rounds_table
from ftis_swarm.cli.progress import console, status
from ftis_swarm.config import NodeConfig

if TYPE_CHECKING:
    from ftis_swarm.models.hub import HubWatch
    from ftis_swarm.node.daemon import Node

logger = logging.getLogger(__name__)


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


def run_node(cfg: NodeConfig, *, table: bool) -> None:
    from ftis_swarm.models import check_model_reachable

    check_model_reachable(cfg.model)  # before torch loads: a machine without the hub hears it in seconds
    from ftis_swarm.node.preflight import check_machine
    from ftis_swarm.node.ranks import join_ranks, launched_with_ranks, run_follower

    ranks = join_ranks() if launched_with_ranks() else None
    rank = ranks.rank if ranks else 0
    if rank == 0:
        check_machine(cfg)
        typer.echo(f"ftis-node join: {cfg.model}{' + LoRA' if cfg.learner.lora else ''} on {cfg.task}, "
                   f"{cfg.rounds} rounds, run directory {cfg.run_dir}")
    cfg.run_dir.mkdir(parents=True, exist_ok=True)
    setup_logging("warning", log_file=cfg.run_dir / ("node.log" if rank == 0 else f"node-rank{rank}.log"))
    from transformers.utils import logging as hf_logging

    from ftis_swarm.node.daemon import Node, RoundResult

    if ranks is not None and not ranks.leader:
        run_follower(cfg, ranks)
        return

    hf_logging.disable_progress_bar()  # weight loading and checkpoint writes: not per-round news
    from ftis_swarm.models.hub import hub_deadline
    from ftis_swarm.ops.summary import format_summary, summarize_run

    with status(f"loading {cfg.model} and joining the swarm (a first use downloads or converts the model)"), \
            hub_deadline(cfg.hub_timeout) as hub:  # a silent hub ends the start in one sentence (models/hub.py)
        node = Node(cfg, ranks=ranks)
        _load_task_rows(node, hub)
    node.install_signal_handlers()
    typer.echo(f"peer id {node.parts.swarm.peer_id}")
    for maddr in node.parts.swarm.visible_maddrs:
        typer.echo(f"listening on {maddr}")
    typer.echo(f"starting at round {node.state.start_round} of {cfg.rounds}")

    records: deque[dict] = deque(maxlen=LIVE_ROWS)  # the table's rows; every round is in metrics.jsonl
    done = 0
    live = None
    title = f"ftis-node {cfg.model} on {cfg.task}"
    if table and sys.stdout.isatty():
        from rich.live import Live

        live = Live(rounds_table(title, records, max_rows=_fitting_rows()), refresh_per_second=2)
        live.start()

    def on_round(res: RoundResult) -> None:
        nonlocal done
        done += 1
        records.append(res.record)
        if live is not None:
            live.update(rounds_table(title, records, max_rows=_fitting_rows(), earlier=done - len(records)))
        else:
            typer.echo(round_line(res.record))

    try:
        results = node.run(on_round=on_round)
    finally:
        if live is not None:
            live.stop()
    typer.echo(f"\ndone: {done} rounds this run")
    typer.echo(format_summary([summarize_run(cfg.run_dir)]))
    typer.echo(f"\nnext: ftis-node report {shlex.quote(str(cfg.run_dir))}   (curves into report.png)")
    if node.health.stopped:  # node/health.py: a node whose training fails must not look alive
        from ftis_swarm.node.health import EXIT_UNHEALTHY

        typer.echo(f"error: the node stopped at round {results[-1].round}: {node.health.explain()}", err=True)
        raise typer.Exit(EXIT_UNHEALTHY)


def _load_task_rows(node: "Node", hub: "HubWatch") -> None:
    """The node's task rows, loaded now rather than in its first round: from the hub (`FTIS_DATA_DIR=hub`),
    under the start's deadline; a silent hub ends the start in one sentence."""
    from ftis_swarm.tasks.dataset import DATA_DIR_ENV, HUB, TaskSourceError

    from_hub = os.environ.get(DATA_DIR_ENV) == HUB
    if from_hub:
        logger.info("loading the rows of task %s from the hub (deadline %g s for each answer)...", node.cfg.task,
                    hub.seconds)
    try:
        node.parts.task.size("train")
    except Exception as exc:  # whatever `datasets` made of the silence; any other failure goes on unchanged
        node.parts.close()  # the node has joined the swarm: leave it before the error ends the process
        if not from_hub or hub.silent is None:
            raise
        raise TaskSourceError(f"the rows of task {node.cfg.task} did not load: {hub.silence()}: check the network, "
                              f"the proxy or HF_ENDPOINT, or unset {DATA_DIR_ENV} to use the copy shipped with the "
                              "package") from exc


LIVE_ROWS = 500
"""Rounds the live table holds, the latest (more than a terminal shows)."""


def _fitting_rows() -> int:
    """Rounds that fit the terminal under the table's title, header and borders."""
    return max(3, console().size.height - 8)
