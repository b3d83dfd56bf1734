"""Runs `ftis-node testnet`: prepares the models, launches, shows a live table, prints the summary.

The first line comes at once; the models are converted (first use only) behind one status
line; in a terminal, a table keeps one row per node with its latest round and its reward so
far, however long the run; elsewhere, one line per round. It ends with the per-node
summary, the run directories and the `ftis-node report` command to run next.
"""

from __future__ import annotations

import shlex
import sys
from collections import deque
from pathlib import Path
from typing import Optional

import typer

from ftis_swarm.cli.app import log_level
from ftis_swarm.cli.live import nodes_table, round_line
from ftis_swarm.cli.progress import status
from ftis_swarm.ops.summary import format_summary, summarize_run
from ftis_swarm.ops.testnet import NodeProc, preset, run_testnet


def run_testnet_cli(*, workdir: Path, nodes: int, rounds: Optional[int], preset_name: str, extra: tuple[str, ...],
                    sibling: Optional[str] = None, table: bool = True, seed: int = 0, qwen_peer: bool = False) -> int:
    typer.echo(f"testnet: {nodes} nodes{' and a Qwen-vocabulary peer' if qwen_peer else ''}, preset {preset_name}, "
               f"run directories under {workdir}")
    doing = ("building the tiny models" if preset_name == "tiny"
             else "preparing the models (the first run converts the embedded SmolLM2 once, about a minute)")
    with status(doing):
        from ftis_swarm.models import resolve_model

        pre = preset(preset_name, workdir, sibling=sibling, qwen_peer=qwen_peer)
        for spec in pre.specs[:nodes] + pre.also:  # once here, not in N nodes at the same time
            resolve_model(spec.model)
    planned = rounds or pre.rounds
    history: dict[Path, deque[dict]] = {}  # each node's latest rounds: the table's last row and sparkline
    first_eval: dict[Path, dict] = {}  # each node's first held-out evaluation (round 0's), kept however long the run
    live = None
    if table and sys.stdout.isatty():
        from rich.live import Live

        live = Live(refresh_per_second=2)
        live.start()

    shown_urls: set[Path] = set()

    def progress(procs: list[NodeProc]) -> None:
        for p in procs:
            if p.run_dir not in shown_urls and p.status_url:
                shown_urls.add(p.run_dir)
                if live is None:
                    typer.echo(f"  {p.run_dir.name:<22} status page {p.status_url}")
            records = history.setdefault(p.run_dir, deque(maxlen=64))
            new = p.new_rows
            records.extend(new)
            for r in new:
                if "heldout_acc" in r:
                    first_eval.setdefault(p.run_dir, r)
            if live is None:
                for r in new:
                    typer.echo(round_line(r, prefix=f"  {p.run_dir.name:<22} "))
        if live is not None:
            rows = [(p.run_dir.name, p.spec.model, planned, _with_first(first_eval.get(p.run_dir), history[p.run_dir]),
                     _state(p)) for p in procs]
            pages = "   ".join(f"{p.run_dir.name}: {p.status_url}" for p in procs if p.status_url)
            live.update(nodes_table(f"testnet: {len(procs)} nodes, {planned} rounds", rows,
                                    caption=f"status pages: {pages}" if pages else None))
        sys.stdout.flush()

    level = log_level("warning").lower()
    child_flags = ("--log-level", level) if level != "warning" else ()
    try:
        result = run_testnet(workdir=workdir, nodes=nodes, rounds=rounds, pre=pre, extra=extra,
                             on_progress=progress, global_flags=child_flags, seed=seed)
    finally:
        if live is not None:
            live.stop()
    typer.echo("")
    typer.echo(format_summary([summarize_run(d) for d in result.run_dirs]))
    typer.echo(f"\nwall time {result.wall_seconds:.0f} s; disk {_mb(result.disk_end_bytes)} at the end, "
               f"{_mb(result.disk_peak_bytes)} at its peak (sampled); run directories:")
    for d, code in zip(result.run_dirs, result.exit_codes):
        typer.echo(f"  {d}" + ("" if code == 0 else f"  (exited with status {code}; see {d / 'node.log'})"))
    typer.echo(f"\nnext: ftis-node report {shlex.quote(str(workdir))}/node-*   (curves into report.png)")
    return 0 if all(c == 0 for c in result.exit_codes) else 1


def _with_first(first: Optional[dict], records: deque[dict]) -> list[dict]:
    """`records`, with the node's first held-out evaluation ahead of them when they no longer hold it."""
    return list(records) if first is None or any(r is first for r in records) else [first, *records]


def _mb(n: int) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB"


def _state(p: NodeProc) -> str:
    code = p.proc.poll()
    if code is None:
        return "running"
    return "done" if code == 0 else f"exit {code}"
