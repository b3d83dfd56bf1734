"""The run's gossip topic on one peer: this node's pointers out, its peers' pointers in, through the gate.

`GossipChannel` subscribes to `keys.gossip_topic(run_id)` on the peer's p2pd (`pubsub`),
publishes each of this node's signed pointers there the moment it is signed, and hands
every message of another peer to `GossipGate.admit`; an admitted pointer goes to
`on_pointer` (the gatherer), a refused one is counted against its sender (`gossip_<reason>`, priced in `peers/faults.py`,
logged at most once per sender per 10 s), and a sender the gate bans is disconnected.
`puzzle_busy` (the puzzle verifier's rate for new identities is spent) is counted under its
name and charged to no one; the gate keeps such a message, and the channel hands it out
through `GossipGate.retry` before each message it receives and every `RETRY_EVERY` s, so
a message checked late reaches `on_pointer` (or its sender's count) as any other.

gossipsub only reaches peers this one is connected to. `keep_connected` is called with
the run's members after each read of the DHT's membership keys: while fewer than
`MIN_TOPIC_PEERS` connected peers subscribe to the topic, it dials members that do not
(proven and scored ones first, as the caller orders them), so the mesh forms without a
bootstrap peer that knows the run. The subscription is opened again if p2pd closes it.

Counters: `gossip_sent`, `gossip_failed` (p2pd refused a publish), `gossip_received`,
`gossip_bytes` (received), `gossip_disconnects`. Runs on the swarm's event loop thread.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import Callable, Optional

from hivemind.dht.validation import DHTRecord
from hivemind.p2p import P2P
from hivemind.utils.timed_storage import get_dht_time

from ftis_swarm.swarm.counters import SwarmCounters, ThrottledLog
from ftis_swarm.swarm.dht.reading import FoundRecord
from ftis_swarm.swarm.dht.validators import NOT_A_FAULT
from ftis_swarm.swarm.gossip import pubsub
from ftis_swarm.swarm.gossip.gate import GossipGate, MessageVerdict, encode_message

logger = logging.getLogger(__name__)

MIN_TOPIC_PEERS = 8
"""Topic peers to keep connected (gossipsub's mesh degree D is 6)."""
RESUBSCRIBE_AFTER = 1.0
RETRY_EVERY = 1.0
"""Seconds between looks at the messages waiting in the gate for the puzzle verifier."""


class GossipChannel:
    """Publishes and receives one run's pointers over gossipsub (see the module docstring)."""

    def __init__(self, *, p2p: P2P, topic: str, gate: GossipGate, self_id: str, counters: SwarmCounters,
                 on_pointer: Callable[[FoundRecord], None]):
        self._p2p, self._topic, self._gate, self._self_id = p2p, topic, gate, self_id
        self._counters, self._on_pointer = counters, on_pointer
        self._log = ThrottledLog(logger, "refused gossip")
        self._publisher = pubsub.Publisher(p2p, topic)
        self._subscription: Optional[pubsub.Subscription] = None
        self._reader: Optional[asyncio.Task] = None
        self._retrier: Optional[asyncio.Task] = None
        self._closed = False

    async def start(self) -> None:
        """Subscribes to the topic and starts reading it."""
        self._subscription = await pubsub.subscribe(self._p2p, self._topic)
        self._reader = asyncio.get_running_loop().create_task(self._read())
        self._retrier = asyncio.get_running_loop().create_task(self._retry_waiting())

    async def publish(self, record: DHTRecord) -> bool:
        """Pushes one signed pointer to the topic; False (counted, logged) when p2pd refuses it."""
        try:
            await self._publisher.publish(encode_message(record))
        except Exception as exc:  # p2pd or its socket: the DHT still carries the pointer
            self._counters.add("gossip_failed")
            logger.warning("gossiping a pointer failed: %r", exc)
            return False
        self._counters.add("gossip_sent")
        return True

    async def keep_connected(self, members: list[str]) -> None:
        """Dials run members while fewer than MIN_TOPIC_PEERS connected peers are on the topic."""
        try:
            on_topic = set(await pubsub.topic_peers(self._p2p, self._topic))
        except Exception as exc:  # p2pd's control socket: try again after the next membership read
            logger.debug("listing the topic's peers failed: %r", exc)
            return
        missing = MIN_TOPIC_PEERS - len(on_topic)
        for peer in [m for m in members if m not in on_topic and m != self._self_id][:max(0, missing)]:
            try:
                await pubsub.connect(self._p2p, peer)
            except Exception as exc:  # an unreachable member: the DHT and its bodies' fetches tell the rest
                logger.debug("could not connect to run member %s: %r", peer, exc)

    def close(self) -> None:
        self._closed = True
        self._publisher.close()
        for task in (self._reader, self._retrier):
            if task is not None:
                task.cancel()
        if self._subscription is not None:
            self._subscription.close()

    async def _read(self) -> None:
        while not self._closed:
            try:
                message = await self._subscription.next()
            except (ConnectionError, asyncio.IncompleteReadError) as exc:
                if not self._closed:
                    logger.warning("the gossip subscription ended (%r); subscribing again", exc)
                    await self._resubscribe()
                continue
            if message.sender != self._self_id:
                try:
                    self._receive(message)
                except Exception:  # a bug of ours on one message must not end the subscription
                    logger.exception("handling a gossip message from %s failed", message.sender)

    async def _resubscribe(self) -> None:
        while not self._closed:
            await asyncio.sleep(RESUBSCRIBE_AFTER)
            try:
                self._subscription = await pubsub.subscribe(self._p2p, self._topic)
                return
            except Exception as exc:  # p2pd restarting or gone: the DHT carries pointers meanwhile
                logger.warning("subscribing to %s again failed (%r); next try in %.0f s", self._topic, exc,
                               RESUBSCRIBE_AFTER)

    async def _retry_waiting(self) -> None:
        while not self._closed:
            await asyncio.sleep(RETRY_EVERY)
            try:
                self._retry(get_dht_time())
            except Exception:  # a bug of ours: the next look tries the rest
                logger.exception("checking the gossip messages that waited for the puzzle verifier failed")

    def _retry(self, now: float) -> None:
        for sender, verdict in self._gate.retry(now):
            self._handle(sender, verdict)

    def _receive(self, message: pubsub.TopicMessage) -> None:
        self._counters.add("gossip_received")
        self._counters.add("gossip_bytes", len(message.data))
        now = get_dht_time()
        self._retry(now)  # those waiting for the puzzle verifier go before this message
        self._handle(message.sender, self._gate.admit(message.sender, message.data, now))

    def _handle(self, sender: str, verdict: MessageVerdict) -> None:
        """Acts on the gate's verdict on one message of `sender`: disconnect, count, or hand the record on."""
        if verdict.disconnect:
            asyncio.get_running_loop().create_task(self._disconnect(sender))
        if verdict.reason in NOT_A_FAULT:
            self._counters.add(verdict.reason)
            return
        if verdict.reason:
            fault = Counter({verdict.reason: 1})
            self._counters.fault(sender, fault)
            self._log.note(sender, fault)
            return
        try:
            self._on_pointer(verdict.record)
        except Exception:  # a bug in handling one pointer must not end the subscription
            logger.exception("handling a gossiped pointer from %s failed", sender)

    async def _disconnect(self, peer: str) -> None:
        try:
            await pubsub.disconnect(self._p2p, peer)
        except Exception as exc:  # not connected (it reached us through a relay), or p2pd refused
            logger.debug("disconnecting %s failed: %r", peer, exc)
            return
        self._counters.add("gossip_disconnects")
        logger.warning("disconnected %s: it went on gossiping past its rate", peer)
