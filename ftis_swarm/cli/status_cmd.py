"""`ftis-node status <run dir or URL>`: what the node's status page shows, in a terminal."""

from __future__ import annotations

import time
from typing import Any, Optional

import typer

from ftis_swarm.cli.app import app


def _f(v: Optional[float], digits: int) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def _paths(peers: Optional[dict[str, int]]) -> str:
    """How the node reaches its connected peers, as the reach section says (nothing before it said)."""
    return f"; peers connected directly {peers['direct']}, through a relay only {peers['relayed']}" if peers else ""


def status_tables(doc: dict[str, Any]) -> list[Any]:
    """The document as a heading line and tables (node, rounds newest first, peers, disk)."""
    from rich.table import Table  # here, not at import: `ftis-node --help` stays quick

    n, reach, disk = doc["node"], doc["reachability"], doc["disk"]
    age = time.time() - float(n.get("updated", 0))
    head = (f"{n['model']} on {n['task']}, run {n['run_id']}, peer {n['peer_id']}, version {n['version']}: "
            f"{n['state']}, round {n['round']} of {n['rounds']} (updated {age:.0f} s ago)\n"
            f"reachability: mode {reach['mode']} ({reach.get('configured', '?')}, decided by "
            f"{reach.get('decided_by', '?')}, switched {reach.get('switches', 0)} time(s)), can peers dial me: "
            f"{reach['dialable']} ({reach.get('note', '')})" + _paths(reach.get("peers")))
    rounds = Table("round", "reward", "accuracy", "filtered", "ESS", "peer share", "peer groups", "gen s", "gather s",
                   "learn s", title="last rounds")
    for r in reversed(doc["rounds"]):
        rounds.add_row(str(r["round"]), _f(r["reward"], 3), _f(r["accuracy"], 3), _f(r["filtered"], 2), _f(r["ess"], 3),
                       _f(r["peer_share"], 2), _f(r["peer_groups"], 0), _f(r["time_generate"], 1),
                       _f(r["time_gather"], 1), _f(r["time_learn"], 1))
    peers = Table("peer", "score", "credit", "cost", "share", "faults", "bans", "refused", "why", title="peers")
    for p in doc["peers"]:
        faults = ", ".join(f"{k} {v}" for k, v in p["faults"].items()) or "-"
        refused = f"yes, {p['banned_for']:.0f} s more" if p["refused"] else "no"
        peers.add_row(p["short"], _f(p["score"], 1), _f(p["credit"], 0), _f(p["cost"], 1), _f(p["share"], 2), faults,
                      str(p["bans"]), refused, p["why"] or "-")
    space = Table("what", "size", title="disk")
    space.add_row("run directory", _mb(disk["run_dir_bytes"]))
    space.add_row("checkpoints", _mb(disk["checkpoints_bytes"]))
    for c in disk["checkpoints"]:
        space.add_row(f"{c['name']} (round {c['round']})", _mb(c["bytes"]))
    return [head, rounds, peers, space]


@app.command()
def status(target: str = typer.Argument(..., help="A node's run directory, or its status page's URL (http://127.0.0.1:PORT/).")) -> None:
    """Show a node's status: rounds, peers and their standing, disk (what its status page shows)."""
    from rich.console import Console

    from ftis_swarm.ops.status import read_status

    console = Console()
    for part in status_tables(read_status(target)):
        console.print(part)
