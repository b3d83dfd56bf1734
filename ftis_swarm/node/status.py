"""`StatusBoard`: what a person looking at a running node wants to see, as one JSON document.

The daemon hands it each round's record and the ledger's accounts (`observe`, one call a
round); it keeps the last `KEPT_ROUNDS` rounds' headline numbers and writes the document to
`<run_dir>/status.json` (a temporary file renamed into place), which `ftis-node status
<run dir>` reads and the status page (`status_page.py`) serves. Its fields:

- `node`: run id, model, task, peer id, version, state (`starting`, `running`, `finished`),
  rounds planned, the round in progress, `updated` (wall-clock seconds);
- `reachability`: `configured` (`swarm.transport.reachability`), `mode` (what the node runs in: `auto`
  decided by dial-back as it starts), `decided_by` (`configured`, `client_mode`, `no peers`,
  `dial-back`, `dial-back unanswered`, `dial-back recheck`), `dialable` (`yes`: a peer opened a TCP connection
  to the node's port at the last dial-back check, `no`, or `unknown`: no peer answered, or
  no check yet), `dialback` (asked, answered, reached, port), `checked` (when) and a `note`
  in words, `switches` and `switched_at` (an `auto` node switches mode after
  `reach_switch_after` contradicting rechecks), `peers` ({"direct": n, "relayed": n}: the peers
  connected when the round ended, directly or through a relay only); the swarm rechecks every
  `reach_recheck_every` seconds (`swarm/dialback.py`). A transport without
  addresses (the in-process loopback) has no reachability: mode is the configured one,
  dialable `unknown`;
- `rounds`: per round, own reward and accuracy, the share of filtered samples, ESS, the
  peers' share of the update's samples, what the swarm gave (`peer_samples_used` of
  `peer_samples_fetched`, `useful_peer_frac`, `zero_signal_bytes` of `peer_bytes`:
  node/peer_yield.py), the held-out accuracy where the round was evaluated, generate /
  gather / learn seconds;
- `heldout`: the held-out curve, every evaluation since round 0 (node/heldout.py): `tasks`
  (the node's own first), `items` (of its own task's set), and `curve`, per evaluation
  `{"round": r, "heldout_acc": x, "heldout_acc_<task>": y}`; a resumed node's from its checkpoint;
- `peers`: per peer heard from, its short id, score (credit minus cost, peers/ledger.py),
  earned credit, cost, its share of the groups in the kept rounds' updates (the credit it
  earned in them, one a group, against all groups, this node's own included), its faults by
  reason, bans, whether it is refused now and why: the fault that tipped its last ban
  (the ledger's `ban_reason`), else the costliest reason charged to it;
- `tasks`: this node's task and its digest (`own`: `{"task", "digest"}`), and per task digest
  seen on a peer's gathered group, the short ids of the peers that last sent it (`peers`:
  `{digest: [peer, ...]}`; a digest other than the node's own is refused as `task_digest`,
  docs/tasks.md);
- `origins`: per network origin whose identities' groups the kept rounds' updates took
  (`observe_origins`, from the intake's `Intake.by_origin`; `peer:<id>` for a peer of no known
  origin), its `tokens` (completion tokens taken), `share` of all the peers' tokens taken,
  `groups`, and `identities` (distinct peer ids seen from it), most tokens first: what one
  origin's crowd takes is capped (`ledger.max_origin_share`, docs/method.md "Shares");
- `disk`: bytes under the run directory and its checkpoints, and each complete checkpoint's
  round and bytes (marker present; hashes are checked on resume, not here).

The module imports no torch (the checkpoint helpers inside the functions that write), so
`ftis-node status` answers at once. No secrets: nothing of the identity key, the config's file paths beyond the run directory,
or the environment.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections import deque
from pathlib import Path
from typing import Any, Optional, Sequence

from ftis_swarm.config import NodeConfig
from ftis_swarm.peers.faults import cost_of
from ftis_swarm.peers.ledger import short_peer

log = logging.getLogger(__name__)

KEPT_ROUNDS = 20
"""Rounds the board shows (and over which a peer's share of the used samples is counted)."""
ROUND_FIELDS = {"reward": "reward", "accuracy": "accuracy", "filtered": "frac_filtered", "ess": "ess",
                "time_generate": "time_generate", "time_gather": "time_gather", "time_learn": "time_learn",
                "time_round": "time_round", "peer_groups": "peer_groups", "policy_version": "policy_version",
                "peer_samples_used": "offpolicy_used", "peer_samples_fetched": "peer_samples_fetched",
                "useful_peer_frac": "useful_peer_frac", "zero_signal_bytes": "zero_signal_bytes",
                "peer_bytes": "peer_bytes", "heldout_acc": "heldout_acc", "time_eval": "time_eval"}
"""Board field -> round record key."""
STATUS_FILE = "status.json"


def _num(v: Any) -> Optional[float]:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def round_row(record: dict[str, Any]) -> dict[str, Any]:
    """A round record's headline numbers; `peer_share`: the peers' samples among the update's."""
    row: dict[str, Any] = {"round": int(record["round"])}
    row.update({name: _num(record.get(key)) for name, key in ROUND_FIELDS.items()})
    seqs, peer = _num(record.get("sequences")), _num(record.get("offpolicy_sequences"))
    row["peer_share"] = peer / seqs if seqs and peer is not None else None
    return row


def heldout_point(record: dict[str, Any]) -> Optional[dict[str, Any]]:
    """A record's held-out accuracies as a point of the curve, None when the round was not evaluated."""
    accs = {k: v for k, v in record.items() if k.startswith("heldout_") and _num(v) is not None}
    return {"round": int(record["round"]), **accs} if "heldout_acc" in accs else None


def reach_metrics(reach: Optional[dict[str, Any]]) -> dict[str, Any]:
    """A round record's reach fields from the swarm's `counters()["reach"]` (none without one)."""
    if not reach:
        return {}
    return {"reach_mode": reach["mode"], "reach_public": reach["mode"] == "public",
            "reach_dialable": reach["dialable"], "reach_mismatch": reach.get("mismatch", False),
            "reach_dialback_answered": reach["dialback"]["answered"], "reach_dialback_reached": reach["dialback"]["reached"],
            "reach_switches": reach.get("switches", 0),
            **{f"reach_peers_{path}": n for path, n in reach.get("peers", {}).items()}}


def reach_section(reach: Optional[dict[str, Any]], *, configured: str, mode: str) -> dict[str, Any]:
    """The document's `reachability`: the swarm's reach (`dialback.Reachability.snapshot`), or the
    configured mode with nothing measured."""
    if not reach:
        return {"configured": configured, "mode": mode, "decided_by": "configured", "dialable": "unknown",
                "dialback": None, "checked": None, "note": "this transport has no addresses: nothing measured"}
    d = reach["dialback"]
    if reach["checked"] is None:
        note = "no dial-back check yet" + (" (no peers to ask)" if reach["decided_by"] == "no peers" else "")
    elif not d["answered"]:
        note = f"none of {d['asked']} peers answered a dial-back of port {d['port']}"
    else:
        note = f"{d['reached']} of {d['answered']} peers dialed port {d['port']} back at the last check"
    if reach.get("switches"):
        note += (f"; switched mode {reach['switches']} time(s), last at "
                 f"{time.strftime('%H:%M:%S', time.gmtime(reach['switched_at']))} UTC")
    return {"configured": reach["configured"], "mode": reach["mode"], "decided_by": reach["decided_by"],
            "dialable": reach["dialable"], "dialback": dict(d), "checked": reach["checked"],
            "switches": reach.get("switches", 0), "switched_at": reach.get("switched_at"), "note": note,
            "peers": reach.get("peers")}


def _why(account: dict[str, Any]) -> Optional[str]:
    if account.get("ban_reason"):
        return str(account["ban_reason"])
    counts = {r: n for r, n in account.get("counts", {}).items() if cost_of(r) > 0}
    return max(counts, key=lambda r: cost_of(r) * counts[r]) if counts else None


def peer_rows(accounts: dict[str, dict[str, Any]], rounds: list[dict[str, Any]], *, now: float) -> list[dict[str, Any]]:
    """The ledger's accounts (`PeerLedger.snapshot`) with each peer's share of the updates' groups, best first.

    `rounds`: rows with `own_groups` and `credited` (peer id -> credit earned that round).
    """
    credited: dict[str, float] = {}
    for row in rounds:
        for peer_id, n in row["credited"].items():
            credited[peer_id] = credited.get(peer_id, 0.0) + n
    total = sum(credited.values()) + sum(row["own_groups"] for row in rounds)
    out = []
    for peer_id, acc in accounts.items():
        refused = not acc.get("allowed", True)
        out.append({"peer": peer_id, "short": short_peer(peer_id), "score": acc.get("score", 0.0),
                    "credit": acc.get("credit", 0.0), "cost": acc.get("cost", 0.0), "tenure": acc.get("tenure", 0),
                    "share": credited.get(peer_id, 0.0) / total if total else 0.0,
                    "faults": {r: n for r, n in sorted(acc.get("counts", {}).items())}, "bans": acc.get("bans", 0),
                    "banned_for": max(0.0, acc.get("banned_until", 0.0) - now), "refused": refused,
                    "why": _why(acc) if refused or acc.get("bans") else None})
    return sorted(out, key=lambda p: -p["score"])


def checkpoint_rows(root: Path) -> list[dict[str, Any]]:
    """Checkpoints with their marker, newest first: `{name, round, bytes}`."""
    from ftis_swarm.learner.checkpoint import MARKER, tree_bytes

    if not root.is_dir():
        return []
    found = sorted((d for d in root.glob("ckpt-*") if (d / MARKER).is_file()), reverse=True)
    return [{"name": d.name, "round": int(d.name.split("-")[1]), "bytes": tree_bytes(d)} for d in found]


class StatusBoard:
    """Build with the node's fixed facts, then `observe` each round; `document()` is status.json."""

    def __init__(self, *, run_dir: Path, run_id: str, model: str, task: str, peer_id: str, rounds: int,
                 version: str, start_round: int = 1, accounts: Optional[dict[str, dict[str, Any]]] = None,
                 reachability: str = "auto", reach_mode: str = "public",
                 reach: Optional[dict[str, Any]] = None, eval_tasks: Sequence[str] = (),
                 heldout: Sequence[dict[str, Any]] = ()) -> None:
        self.run_dir = Path(run_dir)
        self.node: dict[str, Any] = {"run_id": run_id, "model": model, "task": task, "peer_id": peer_id,
                                     "version": version, "rounds": rounds, "round": start_round, "state": "starting",
                                     "started": time.time(), "updated": time.time()}
        self.rounds: deque[dict[str, Any]] = deque(maxlen=KEPT_ROUNDS)
        self.accounts: dict[str, dict[str, Any]] = dict(accounts or {})
        """The ledger's accounts as last seen (a resumed node's, from its checkpoint, to begin with)."""
        self.url: Optional[str] = None
        self.reachability, self.reach_mode = reachability, reach_mode
        """The configured reachability, and the mode it means without a probe (`TransportConfig.reach_mode`)."""
        self.reach = reach
        """The swarm's reach as last seen (`dialback.Reachability.snapshot`), None for a transport without one."""
        self.heldout: dict[str, Any] = {"tasks": list(dict.fromkeys([task, *eval_tasks])),
                                        "items": next((p["heldout_items"] for p in reversed(heldout)
                                                       if p.get("heldout_items")), None),
                                        "curve": [dict(p) for p in heldout]}
        """The held-out curve (`HeldoutEval.curve`, a resumed node's from its checkpoint)."""
        self.task_digest = ""
        """This node's task digest (`Task.digest`), set by the node once its task is built."""
        self.peer_digests: dict[str, str] = {}
        """Peer id -> the task digest of its last gathered group."""
        self.server: Optional[Any] = None
        self.last: dict[str, Any] = {}
        """The document last written (what the status page serves)."""
        self.origins: deque[dict[str, dict[str, Any]]] = deque(maxlen=KEPT_ROUNDS)
        """Per kept round, the intake's take by origin (`observe_origins`)."""

    def observe(self, record: dict[str, Any], accounts: dict[str, dict[str, Any]],
                reach: Optional[dict[str, Any]] = None) -> None:
        """A finished round: its record (metrics.jsonl's line), the ledger's accounts after it, and the
        swarm's reach (`counters()["reach"]`; None keeps the last seen)."""
        self.reach = reach or self.reach
        row = round_row(record)
        row["own_groups"] = int(record.get("own_groups") or 0)
        row["credited"] = {p: a.get("credit", 0.0) - self.accounts.get(p, {}).get("credit", 0.0)
                           for p, a in accounts.items()}
        self.rounds.append(row)
        self.accounts = accounts
        self.node.update(state="running", round=int(record["round"]) + 1)
        self._heldout(record)
        self.write()

    def observe_origins(self, by_origin: dict[str, dict[str, Any]]) -> None:
        """A round's take by origin (`Intake.by_origin`): shown in `origins` from the next write on."""
        self.origins.append({o: dict(v) for o, v in by_origin.items()})

    def origins_section(self) -> list[dict[str, Any]]:
        """`origins`: per origin over the kept rounds (module docstring), most tokens first."""
        rows: dict[str, dict[str, Any]] = {}
        for by_origin in self.origins:
            for origin, v in by_origin.items():
                row = rows.setdefault(origin, {"origin": origin, "tokens": 0, "groups": 0, "peers": set()})
                row["tokens"] += int(v.get("tokens", 0))
                row["groups"] += int(v.get("groups", 0))
                row["peers"].update(v.get("peers", ()))
        total = sum(r["tokens"] for r in rows.values())
        return sorted(({"origin": r["origin"], "tokens": r["tokens"], "groups": r["groups"],
                        "share": r["tokens"] / total if total else 0.0, "identities": len(r["peers"])}
                       for r in rows.values()), key=lambda r: (-r["tokens"], r["origin"]))

    def saw_groups(self, groups: Sequence[Any]) -> None:
        """Peers' gathered groups: each sender's task digest (`tdg`) is remembered for `tasks`."""
        for g in groups:
            self.peer_digests[g.sender] = g.task_digest

    def tasks_section(self) -> dict[str, Any]:
        """`tasks`: this node's task and digest, and the peers (short ids) seen with each digest."""
        by_digest: dict[str, list[str]] = {}
        for peer, digest in sorted(self.peer_digests.items()):
            by_digest.setdefault(digest or "(none)", []).append(short_peer(peer))
        return {"own": {"task": self.node["task"], "digest": self.task_digest}, "peers": by_digest}

    def observe_heldout(self, record: dict[str, Any]) -> None:
        """An evaluation outside a round (round 0's, before any update): the curve's point, no round row."""
        self._heldout(record)
        self.write()

    def _heldout(self, record: dict[str, Any]) -> None:
        point = heldout_point(record)
        if point is not None:
            self.heldout["curve"].append(point)
            self.heldout["items"] = record.get("heldout_items", self.heldout["items"])

    def close(self) -> None:
        """The node is done: the document says so, and the page stops."""
        self.node.update(state="finished")
        self.write()
        if self.server is not None:
            self.server.close()

    def document(self) -> dict[str, Any]:
        from ftis_swarm.learner.checkpoint import tree_bytes  # torch: not for `ftis-node status`, which reads

        now = time.time()
        self.node["updated"] = now
        rounds = list(self.rounds)
        ckpts = checkpoint_rows(self.run_dir / "checkpoints")
        return {
            "node": dict(self.node, url=self.url),
            "reachability": reach_section(self.reach, configured=self.reachability, mode=self.reach_mode),
            "rounds": [{k: v for k, v in r.items() if k != "credited"} for r in rounds],
            "peers": peer_rows(self.accounts, rounds, now=now),
            "heldout": {**self.heldout, "curve": list(self.heldout["curve"])},
            "tasks": self.tasks_section(),
            "origins": self.origins_section(),
            "disk": {"run_dir_bytes": tree_bytes(self.run_dir),
                     "checkpoints_bytes": tree_bytes(self.run_dir / "checkpoints"), "checkpoints": ckpts},
        }

    def write(self) -> dict[str, Any]:
        """Writes status.json into the run directory (atomically); returns the document."""
        doc = self.document()
        tmp = self.run_dir / (STATUS_FILE + ".tmp")
        tmp.write_text(json.dumps(doc, indent=1))
        os.replace(tmp, self.run_dir / STATUS_FILE)
        self.last = doc
        return doc


def open_status(cfg: NodeConfig, *, peer_id: str, start_round: int, accounts: dict[str, dict[str, Any]],
                reach: Optional[dict[str, Any]] = None, heldout: Sequence[dict[str, Any]] = ()) -> StatusBoard:
    """The node's board, its first document written, and its page served when `cfg.status_port` is set.

    `accounts`: the ledger's (`PeerLedger.snapshot`) as the node starts, so that the first round's
    credit is told apart from what a resumed node earned before; `reach`: the swarm's (`counters()["reach"]`);
    `heldout`: the held-out curve so far (a resumed node's)."""
    from ftis_swarm import __version__

    lora = cfg.learner.lora
    board = StatusBoard(run_dir=cfg.run_dir, run_id=cfg.swarm.run_id, task=cfg.task, peer_id=peer_id,
                        model=cfg.model + (f" + LoRA r{lora.rank}" if lora else ""), rounds=cfg.rounds,
                        version=__version__, start_round=start_round, accounts=accounts,
                        reachability=cfg.swarm.transport.reachability, reach_mode=cfg.swarm.transport.reach_mode,
                        reach=reach,
                        eval_tasks=cfg.eval_tasks, heldout=heldout)
    if cfg.status_port is not None:
        from ftis_swarm.node.status_page import StatusServer

        board.server = StatusServer(lambda: board.last, port=cfg.status_port, host=cfg.status_host)
        board.url = board.server.url
        board.server.write_url(cfg.run_dir)
        log.info("status page at %s", board.url)
    board.write()
    return board
