"""Dial-back: a public peer tells a starting node whether its port is reachable (as Petals probes).

Protocol `ftis.dialback.v1`, one question per stream:

    request   2 bytes, big-endian: the TCP port the asker listens on
    response  1 byte: 1 a TCP connection to that port opened, 0 it did not, 2 cannot say
              (the asker came through a relay, or this peer is busy)

The answering peer dials only the address the asker's stream came from (its observed IP),
never one the asker names, so nobody can point it at a third party; it answers at most
`MAX_PROBES` questions at once and gives each `DIAL_TIMEOUT` seconds.

`Reachability` is what the node knows of its own reach, for its metrics and status page:
the mode it runs in (`reach.py`), how that was decided (configured, or `auto` by dial-back
answers), and whether peers could dial its port at the last check. `watch_reachability`
asks again every `TransportConfig.reach_recheck_every` seconds while the node runs: a port
that closed (or opened) later is said in a WARNING, in `dialable` and in `mismatch` (the
check contradicts the mode). An `auto` node whose last `reach_switch_after` answered
checks all contradicted its mode switches (`switch_due`; the switch itself is
`switch.reopen_peer`, called by `SwarmClient.switch_reach_if_due`): another mode means
other p2pd flags, so a new daemon, a new join and a new relay slot, a few seconds without
serving, which one contradicting check (a peer busy or restarting) is not worth. A
configured mode never switches: the operator said it.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Callable, Optional

from hivemind.p2p import P2P, PeerID
from hivemind.p2p.p2p_daemon_bindings.datastructures import StreamInfo

logger = logging.getLogger(__name__)

DIALBACK_PROTOCOL = "ftis.dialback.v1"
DIAL_TIMEOUT = 2.0
MAX_PROBES = 8
MAX_ASKED = 5
"""Peers asked in one check (Petals asks up to 5 too)."""
_REACHED, _NOT_REACHED, _UNKNOWN = b"\x01", b"\x00", b"\x02"


class Reachability:
    """This node's reach: mode, how it was decided, and the last dial-back check (thread-safe `snapshot`)."""

    def __init__(self, *, configured: str, mode: str, decided_by: str) -> None:
        self._lock = threading.Lock()
        self.configured = configured
        self.mode = mode
        self.decided_by = decided_by
        """`configured`, `client_mode`, `no peers`, `dial-back` or `dial-back unanswered`."""
        self._answers = {"asked": 0, "answered": 0, "reached": 0, "port": 0}
        self._checked: Optional[float] = None
        self._checks = 0
        self._contradicting = 0  # answered checks in a row that contradicted the mode
        self._switches = 0
        self._switched_at: Optional[float] = None
        self._switch_failures = 0

    def record_check(self, *, asked: int, answered: int, reached: int, port: int) -> str:
        """One round of dial-back answers; returns the resulting `dialable`. A check nobody answered
        neither contradicts the mode nor breaks a row of contradicting ones."""
        with self._lock:
            self._answers = {"asked": asked, "answered": answered, "reached": reached, "port": port}
            self._checked, self._checks = time.time(), self._checks + 1
            if self._dialable() != "unknown":
                self._contradicting = self._contradicting + 1 if self._mismatch() else 0
            return self._dialable()

    @property
    def can_switch(self) -> bool:
        """Whether this node may switch mode: `auto` decided by dial-back (not configured, not `client_mode`)."""
        return self.configured == "auto" and self.decided_by.startswith("dial-back")

    def switch_due(self, after: int) -> Optional[str]:
        """The mode an `auto` node should switch to now that its last `after` answered checks all
        contradicted its mode (`relayed` for a public node nobody could dial, `public` for a NAT'd one a
        peer could), else None; always None for a configured mode or one `client_mode` decided."""
        with self._lock:
            if not self.can_switch or self._contradicting < after:
                return None
            return "relayed" if self.mode == "public" else "public"

    def record_switch(self, mode: str) -> None:
        """The node now runs in `mode` after a switch; the row of contradicting checks starts afresh."""
        with self._lock:
            self.mode, self.decided_by = mode, "dial-back recheck"
            self._contradicting, self._switches, self._switched_at = 0, self._switches + 1, time.time()

    def record_switch_failed(self) -> None:
        """A switch whose new daemon did not start (the node restarted in its old mode); the row starts afresh,
        so the next try comes `after` checks later, not at once."""
        with self._lock:
            self._contradicting, self._switch_failures = 0, self._switch_failures + 1

    def _dialable(self) -> str:
        if not self._answers["answered"]:
            return "unknown"
        return "yes" if self._answers["reached"] else "no"

    @property
    def dialable(self) -> str:
        """`yes` (a peer opened a TCP connection to this node's port at the last check), `no`, or `unknown`."""
        with self._lock:
            return self._dialable()

    def _mismatch(self) -> bool:
        dialable = self._dialable()
        return (self.mode == "public" and dialable == "no") or (self.mode != "public" and dialable == "yes")

    @property
    def mismatch(self) -> bool:
        """Whether the last check contradicts the mode: a public node nobody could dial, or a NAT'd mode whose
        port a peer reached (an `auto` node switches after `reach_switch_after` such checks in a row)."""
        with self._lock:
            return self._mismatch()

    def snapshot(self) -> dict:
        """JSON-able: configured, mode, decided_by, dialable, mismatch, dialback {asked, answered, reached,
        port}, checked (unix time of the last check, None before one), checks, contradicting (answered checks
        in a row that contradicted the mode), switches (mode switches so far), switched_at (unix time of the
        last, None before one), switch_failures (switches that fell back to the old mode)."""
        with self._lock:
            return {"configured": self.configured, "mode": self.mode, "decided_by": self.decided_by,
                    "dialable": self._dialable(), "mismatch": self._mismatch(), "dialback": dict(self._answers),
                    "checked": self._checked, "checks": self._checks, "contradicting": self._contradicting,
                    "switches": self._switches, "switched_at": self._switched_at,
                    "switch_failures": self._switch_failures}


def _observed_ip(info: StreamInfo) -> str:
    """The IP the stream came from, or "" for a relayed stream or an address without one."""
    text = str(info.addr)
    if "/p2p-circuit" in text:
        return ""
    for proto in ("ip4", "ip6"):
        try:
            return info.addr[proto]
        except Exception:  # multiaddr raises its own lookup errors for a missing protocol
            continue
    return ""


async def serve_dialback(p2p: P2P) -> None:
    """Answers dial-back questions on `p2p` (a public node's duty)."""
    slots = asyncio.Semaphore(MAX_PROBES)

    async def handle(info: StreamInfo, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            port = int.from_bytes(await asyncio.wait_for(reader.readexactly(2), DIAL_TIMEOUT), "big")
            ip = _observed_ip(info)
            if not ip or not port or slots.locked():
                writer.write(_UNKNOWN)
            else:
                async with slots:
                    writer.write(_REACHED if await _can_connect(ip, port) else _NOT_REACHED)
            await asyncio.wait_for(writer.drain(), DIAL_TIMEOUT)
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, ConnectionError) as exc:
            logger.debug("dial-back question from %s ended early: %r", info.peer_id, exc)
        finally:
            writer.close()

    await p2p.add_binary_stream_handler(DIALBACK_PROTOCOL, handle)


async def _can_connect(ip: str, port: int) -> bool:
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(ip, port), DIAL_TIMEOUT)
    except (asyncio.TimeoutError, OSError):
        return False
    writer.close()
    return True


async def ask_dialback(p2p: P2P, peer_id: str, port: int) -> bool | None:
    """Whether `peer_id` could open a TCP connection to `port` at this node's address; None: no answer."""
    try:
        _, reader, writer = await asyncio.wait_for(
            p2p.call_binary_stream_handler(PeerID.from_base58(peer_id), DIALBACK_PROTOCOL), DIAL_TIMEOUT)
    except Exception as exc:  # p2pd reports a peer without the protocol or a failed dial in several types
        logger.debug("no dial-back from %s: %r", peer_id, exc)
        return None
    try:
        writer.write(port.to_bytes(2, "big"))
        await asyncio.wait_for(writer.drain(), DIAL_TIMEOUT)
        answer = await asyncio.wait_for(reader.readexactly(1), 3 * DIAL_TIMEOUT)
    except (asyncio.TimeoutError, asyncio.IncompleteReadError, ConnectionError):
        return None
    finally:
        writer.close()
    return {_REACHED: True, _NOT_REACHED: False}.get(answer)


async def ask_peers(p2p: P2P, peer_ids: list[str], port: int) -> tuple[int, int]:
    """(answered, reached): how many of `peer_ids` answered a dial-back of `port`, and how many reached it."""
    answers = await asyncio.gather(*(ask_dialback(p2p, peer_id, port) for peer_id in peer_ids))
    return sum(a is not None for a in answers), sum(a is True for a in answers)


async def watch_reachability(p2p: P2P, reach: Reachability, *, askable: Callable[[], list[str]], port: int,
                             every: float, first: float) -> None:
    """Asks `askable()` peers (at most `MAX_ASKED`) to dial `port` back `first` seconds from now, then every
    `every` seconds, and records each check in `reach`; a check that contradicts the mode is a WARNING."""
    delay = first
    while True:
        await asyncio.sleep(delay)
        delay = every
        peer_ids = askable()[:MAX_ASKED]
        if not peer_ids or not port:
            continue
        answered, reached = await ask_peers(p2p, peer_ids, port)
        was = reach.dialable
        now = reach.record_check(asked=len(peer_ids), answered=answered, reached=reached, port=port)
        if now == was or now == "unknown":
            continue
        auto = reach.can_switch
        if reach.mode == "public" and now == "no":
            logger.warning("reachability: none of %d peers could dial port %d back, but this node runs public: NAT'd "
                           "peers cannot fetch its groups; %s", answered, port,
                           "it switches to relayed if the next checks agree" if auto
                           else "restart it with --reachability relayed (or auto)")
        elif reach.mode != "public" and now == "yes":
            logger.warning("reachability: %d of %d peers dialed port %d back: this node could run public (serve the "
                           "DHT and a relay); %s", reached, answered, port,
                           "it switches to public if the next checks agree" if auto
                           else "restart it with --reachability auto or public")
        else:
            logger.info("reachability %s: %d of %d peers dialed port %d back", reach.mode, reached, answered, port)
