"""A running `auto` node's switch of reach mode: its daemon restarted in place (`reopen_peer`).

Another mode means other p2pd flags, so a new daemon, a new join and a new relay slot, a
few seconds without serving. `switch_if_due` does it once the node's last
`reach_switch_after` answered dial-back rechecks all contradicted its mode
(`dialback.Reachability.switch_due`); the caller stops what it runs on the old daemon
(`pause`) and starts it again on the new one (`resume`): `SwarmClient.switch_reach_if_due`
passes its gatherer, gossip and announcer.
"""

from __future__ import annotations

import logging
import time
from typing import Callable

from ftis_swarm.config import SwarmConfig
from ftis_swarm.swarm.errors import SwarmError
from ftis_swarm.swarm.peer import daemon
from ftis_swarm.swarm.peer.handle import PeerHandle
from ftis_swarm.swarm.peer.start import start_services

logger = logging.getLogger(__name__)


def switch_if_due(handle: PeerHandle, *, pause: Callable[[], None], resume: Callable[[], None]) -> bool:
    """Switches `handle`'s mode when its rechecks say so: `pause()`, `reopen_peer`, `resume()` (also after a
    switch that fell back to the old mode: the daemon is a new one either way), and counts
    `reach_switches`. True when it switched; False when none was due, or the new daemon did not start
    and the old mode goes on. Raises SwarmError only when the daemon restarted in neither mode."""
    reach = handle.reach
    target = reach.switch_due(handle.cfg.transport.reach_switch_after) if reach is not None else None
    if target is None:
        return False
    was, started = reach.mode, time.monotonic()
    logger.warning("reachability auto: %d rechecks disagree; switching from %s to %s",
                   reach.snapshot()["contradicting"], was, target)
    pause()
    switched = reopen_peer(handle, target)
    resume()
    if switched:
        handle.counters.add("reach_switches")
        logger.info("reachability %s after %.1f s without serving (%s)", target, time.monotonic() - started,
                    " ".join(handle.visible_maddrs) or "no listening address")
    return switched


def reopen_peer(handle: PeerHandle, mode: str) -> bool:
    """Restarts `handle`'s DHT peer and p2pd in `mode`, in place: the same identity (its lock held
    throughout, so no other process can take it meanwhile), port, loop, puzzle, counters, policy,
    checker and `Reachability`; a relayed node waits for its relay slot as at start. Records it
    (`Reachability.record_switch`) and returns True. If the new daemon does not start, it logs an
    ERROR, counts `reach_switch_failed`, starts the old mode again and returns False. Raises
    SwarmError (one sentence) only when neither mode starts: the node then has no daemon.

    The old daemon is gone before the new one listens (they share the port): for that time,
    a few seconds, the node serves nobody, and whatever was on the old daemon (streams,
    subscriptions, handlers other than the dial-back one) is the caller's to open again.
    """
    old = handle.cfg.replace(transport={"port": handle.cfg.transport.port or handle.bound_port()})
    if handle.watch is not None:
        handle.watch.cancel()
    try:
        handle.loop.run(daemon.close_node(handle.node), timeout=10.0)
    except TimeoutError:
        logger.warning("the old DHT peer did not close within 10 s; starting the new one anyway")
    try:
        _restart(handle, old.replace(transport={"reachability": mode}))
    except Exception as exc:  # p2pd, hivemind, the port or the relay: whatever it is, the old mode goes on
        handle.counters.add("reach_switch_failed")
        logger.error("reachability auto: the daemon did not start %s (%s); starting it %s again, as before",
                     mode, exc, old.transport.reach_mode)
        if handle.reach is not None:
            handle.reach.record_switch_failed()
        try:
            _restart(handle, old)
        except Exception as again:  # nothing left to fall back to: one sentence at the node's edge
            raise SwarmError(f"the libp2p daemon restarted neither {mode} nor {old.transport.reach_mode} on port "
                             f"{old.transport.port}: {again}") from again
        return False
    if handle.reach is not None:
        handle.reach.record_switch(mode)
    return True


def _restart(handle: PeerHandle, cfg: SwarmConfig) -> None:
    """Starts a daemon and DHT peer for `cfg` on `handle`'s loop and identity, and its services."""
    net = cfg.transport
    node, origins = handle.loop.run(daemon.start_dht(cfg, identity_path=handle.identity.identity.path,
                                                     checker=handle.checker, policy=handle.policy,
                                                     counters=handle.counters), timeout=net.join_timeout + 10.0)
    try:
        maddrs = daemon.visible_maddrs(handle.loop, node)
        if net.reach_mode == "relayed" and net.peers:
            maddrs = daemon.wait_for_relay_slot(handle.loop, node, maddrs, wait=net.relay_wait)
        handle.node, handle.origins, handle.visible_maddrs, handle.cfg = node, origins, maddrs, cfg
        start_services(handle, first_check=cfg.transport.reach_recheck_every)
    except BaseException:  # the daemon started but is not usable: free its port for the fallback
        try:
            handle.loop.run(daemon.close_node(node), timeout=10.0)
        except TimeoutError:
            logger.warning("a DHT peer that failed to start did not close within 10 s")
        raise
