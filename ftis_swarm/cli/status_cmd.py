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


def heldout_line(heldout: Optional[dict[str, Any]]) -> str:
    """The held-out curve in one line: each task's first and latest evaluation."""
    if not heldout or not heldout.get("curve"):
        return "held-out accuracy: no evaluation yet"
    parts = []
    for i, task in enumerate(heldout["tasks"]):
        key = "heldout_acc" if i == 0 else f"heldout_acc_{task}"
        pts = [p for p in heldout["curve"] if isinstance(p.get(key), (int, float))]
        if pts:
            parts.append(f"{task} {pts[0][key]:.3f} (round {pts[0]['round']}) -> {pts[-1][key]:.3f} "
                         f"(round {pts[-1]['round']})")
    items = f" on {heldout['items']} test items" if heldout.get("items") else ""
    return f"held-out accuracy (greedy pass@1{items}): " + "; ".join(parts)


def digests_line(tasks: Optional[dict[str, Any]]) -> str:
    """`task digest <own>; peers: <digest> (n peers), ...` (a digest other than the own is refused)."""
    if not tasks:
        return "task digest: not reported"
    own = tasks["own"].get("digest") or "-"
    peers = "; ".join(f"{d} ({len(p)} peer{'s' if len(p) != 1 else ''}{'' if d == own else ', refused'})"
                      for d, p in tasks.get("peers", {}).items())
    return f"task digest {own}; peers' digests: {peers or 'none seen yet'}"


def _used(r: dict[str, Any]) -> str:
    fetched = r.get("peer_samples_fetched")
    return f"{r.get('peer_samples_used') or 0:.0f} / {fetched:.0f}" if fetched else "-"


def _zero(r: dict[str, Any]) -> str:
    total = r.get("peer_bytes")
    return f"{(r.get('zero_signal_bytes') or 0) / 1e3:.1f} / {total / 1e3:.1f}" if total else "-"


def status_tables(doc: dict[str, Any]) -> list[Any]:
    """The document as a heading line and tables (node, rounds newest first, peers, origins when any, disk)."""
    from rich.table import Table  # here, not at import: `ftis-node --help` stays quick

    n, reach, disk = doc["node"], doc["reachability"], doc["disk"]
    age = time.time() - float(n.get("updated", 0))
    head = (f"{n['model']} on {n['task']}, run {n['run_id']}, peer {n['peer_id']}, version {n['version']}: "
            f"{n['state']}, round {n['round']} of {n['rounds']} (updated {age:.0f} s ago)\n"
            f"reachability: mode {reach['mode']} ({reach.get('configured', '?')}, decided by "
            f"{reach.get('decided_by', '?')}, switched {reach.get('switches', 0)} time(s)), can peers dial me: "
            f"{reach['dialable']} ({reach.get('note', '')})" + _paths(reach.get("peers")) + "\n"
            + heldout_line(doc.get("heldout")) + "\n" + digests_line(doc.get("tasks")))
    same = all(r.get("accuracy") is None or (r.get("reward") is not None and abs(r["accuracy"] - r["reward"]) < 1e-9)
               for r in doc["rounds"])  # a binary reward is the accuracy: one column
    rounds = Table("round", "reward=acc" if same else "reward", *([] if same else ["accuracy"]), "held-out", "filtered",
                   "ESS", "peer share", "peer groups", "peer samples used / fetched", "useful", "zero-signal kB / kB",
                   "gen s", "gather s", "learn s", title="last rounds")
    for r in reversed(doc["rounds"]):
        rounds.add_row(str(r["round"]), _f(r["reward"], 3), *([] if same else [_f(r["accuracy"], 3)]),
                       _f(r.get("heldout_acc"), 3), _f(r["filtered"], 2), _f(r["ess"], 3), _f(r["peer_share"], 2),
                       _f(r["peer_groups"], 0), _used(r), _f(r.get("useful_peer_frac"), 2), _zero(r),
                       _f(r["time_generate"], 1), _f(r["time_gather"], 1), _f(r["time_learn"], 1))
    peers = Table("peer", "score", "credit", "tenure", "cost", "share", "faults", "bans", "refused", "why",
                  title="peers")
    for p in doc["peers"]:
        faults = ", ".join(f"{k} {v}" for k, v in p["faults"].items()) or "-"
        refused = f"yes, {p['banned_for']:.0f} s more" if p["refused"] else "no"
        peers.add_row(p["short"], _f(p["score"], 1), _f(p["credit"], 0), str(p.get("tenure", 0)), _f(p["cost"], 1),
                      _f(p["share"], 2), faults, str(p["bans"]), refused, p["why"] or "-")
    origins = Table("origin", "identities", "tokens", "share of peer tokens", "groups",
                    title="origins (the kept rounds' updates)")
    for o in doc.get("origins") or []:  # a document of an older node has none
        origins.add_row(o["origin"], str(o["identities"]), str(o["tokens"]), _f(o["share"], 2), str(o["groups"]))
    space = Table("what", "size", title="disk")
    space.add_row("run directory", _mb(disk["run_dir_bytes"]))
    space.add_row("checkpoints", _mb(disk["checkpoints_bytes"]))
    for c in disk["checkpoints"]:
        space.add_row(f"{c['name']} (round {c['round']})", _mb(c["bytes"]))
    return [head, rounds, peers, *([origins] if doc.get("origins") else []), space]


@app.command()
def status(target: str = typer.Argument(..., help="A node's run directory, or its status page's URL (http://127.0.0.1:PORT/).")) -> None:
    """Show a node's status: rounds, peers and their standing, disk (what its status page shows)."""
    from rich.console import Console

    from ftis_swarm.ops.status import read_status

    console = Console()
    for part in status_tables(read_status(target)):
        console.print(part)
