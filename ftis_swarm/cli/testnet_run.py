"""Runs `ftis-node testnet`: prepares the models, launches, shows progress, prints the summary."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from ftis_swarm.node.summary import format_summary, summarize_run
from ftis_swarm.node.testnet import NodeProc, preset, run_testnet


def run_testnet_cli(*, workdir: Path, nodes: int, rounds: int | None, preset_name: str,
                    extra: tuple[str, ...]) -> int:
    from ftis_swarm.models import resolve_model

    pre = preset(preset_name, workdir)
    # Convert the embedded models once here, not in N nodes at the same time.
    for spec in pre.specs:
        resolve_model(spec.model)
    typer.echo(f"testnet: {nodes} nodes, preset {preset_name}, run directories under {workdir}")
    seen: dict[str, int] = {}

    def progress(procs: list[NodeProc]) -> None:
        for p in procs:
            if p.rounds_seen > seen.get(p.spec.name + str(p.run_dir), 0):
                seen[p.spec.name + str(p.run_dir)] = p.rounds_seen
                r = p.last
                typer.echo(f"  {p.run_dir.name:<22} round {r.get('round')}: reward {_f(r.get('reward'))}, "
                           f"peer groups {r.get('peer_groups', 0)}, filtered {_f(r.get('frac_offpolicy_filtered'))}, "
                           f"round {_f(r.get('time_round'), 1)} s")
                sys.stdout.flush()

    result = run_testnet(workdir=workdir, nodes=nodes, rounds=rounds, pre=pre, extra=extra,
                         on_progress=progress)
    typer.echo("")
    typer.echo(format_summary([summarize_run(d) for d in result.run_dirs]))
    typer.echo(f"\nwall time {result.wall_seconds:.0f} s; run directories:")
    for d, code in zip(result.run_dirs, result.exit_codes):
        typer.echo(f"  {d}" + ("" if code == 0 else f"  (exited with status {code}; see {d / 'node.log'})"))
    return 0 if all(c == 0 for c in result.exit_codes) else 1


def _f(x, digits: int = 3) -> str:
    return "-" if not isinstance(x, (int, float)) else f"{x:.{digits}f}"
