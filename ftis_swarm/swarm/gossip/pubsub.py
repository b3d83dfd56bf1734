"""gossipsub through hivemind's bundled p2pd: the switch hivemind never turns on, and its control requests.

hivemind 1.1.12 ships p2pd with gossipsub built in (`-pubsub`) but never turns it on, and
its control client has no PUBSUB requests. `PubsubP2P` is hivemind's `P2P` with the flags
added to p2pd's command line: gossipsub, every message signed by the node's key and
checked strictly, so a message's `from` is the peer that signed it. `subscribe`,
`Publisher`, `topic_peers`, `connect` and `disconnect` are the control requests, each on
its own connection to the daemon as hivemind's bindings make theirs (a `Publisher` keeps
one open). This module reads
`P2P._client` and overrides `P2P._make_process_args`, both internal: hivemind is pinned
(==1.1.12, pyproject.toml).

Measured on loopback (3 daemons): 128 B to 4 KiB messages arrive in 0.6 ms median, 64 KiB
in 1.5 ms; p2pd drops a message over 1 MiB silently while publish reports OK; and it
relays every valid-signed message to its mesh before any subscriber sees it (the control
protocol has no validation hook), so a receiver's checks protect the receiver only. A
subscriber that falls 32 messages behind loses messages (go-libp2p-pubsub's buffer).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Optional

from hivemind.p2p import P2P, PeerID
from hivemind.p2p.p2p_daemon_bindings.utils import raise_if_failed, read_pbmsg_safe, write_pbmsg
from hivemind.proto import p2pd_pb2

logger = logging.getLogger(__name__)

PUBSUB_FLAGS = ("-pubsub=1", "-pubsubRouter=gossipsub", "-pubsubSign=1", "-pubsubSignStrict=1")


class PubsubP2P(P2P):
    """hivemind's P2P whose p2pd runs gossipsub (create it with `PubsubP2P.create`, as `P2P`)."""

    @staticmethod
    def _make_process_args(*args, **kwargs) -> list[str]:
        return P2P._make_process_args(*args, **kwargs) + list(PUBSUB_FLAGS)


@dataclasses.dataclass(frozen=True)
class TopicMessage:
    """One message of a subscribed topic: `sender` signed it (base58 peer id, checked by p2pd)."""

    sender: str
    data: bytes


class Subscription:
    """An open subscription to one topic; `next` waits for its next message, `close` ends it."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self._reader, self._writer = reader, writer

    async def next(self) -> TopicMessage:
        """The next message; raises ConnectionError (or IncompleteReadError) when the daemon closed it."""
        message = p2pd_pb2.PSMessage()
        await read_pbmsg_safe(self._reader, message)
        return TopicMessage(sender=PeerID(getattr(message, "from")).to_base58(), data=message.data)

    def close(self) -> None:
        self._writer.close()


async def _request(p2p: P2P, request: p2pd_pb2.PSRequest) -> tuple[p2pd_pb2.Response, asyncio.StreamReader,
                                                                     asyncio.StreamWriter]:
    reader, writer = await p2p._client.control.daemon_connector.open_connection()
    try:
        await write_pbmsg(writer, p2pd_pb2.Request(type=p2pd_pb2.Request.PUBSUB, pubsub=request))
        response = p2pd_pb2.Response()
        await read_pbmsg_safe(reader, response)
        raise_if_failed(response)
    except BaseException:
        writer.close()
        raise
    return response, reader, writer


async def subscribe(p2p: P2P, topic: str) -> Subscription:
    """Joins `topic`'s mesh; the subscription lasts until closed (or the daemon stops)."""
    _, reader, writer = await _request(p2p, p2pd_pb2.PSRequest(type=p2pd_pb2.PSRequest.SUBSCRIBE, topic=topic))
    return Subscription(reader, writer)


class Publisher:
    """Publishes to one topic over one control connection kept open (p2pd answers request after request
    on it), opened again when it breaks: a publish costs no connection set-up."""

    def __init__(self, p2p: P2P, topic: str):
        self._p2p, self._topic = p2p, topic
        self._lock = asyncio.Lock()
        self._connection: Optional[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = None

    async def publish(self, data: bytes) -> None:
        """Hands `data` to p2pd for the topic's mesh; raises P2PDaemonError when p2pd refuses it."""
        request = p2pd_pb2.Request(type=p2pd_pb2.Request.PUBSUB, pubsub=p2pd_pb2.PSRequest(
            type=p2pd_pb2.PSRequest.PUBLISH, topic=self._topic, data=data))
        async with self._lock:
            for attempt in range(2):
                if self._connection is None:
                    self._connection = await self._p2p._client.control.daemon_connector.open_connection()
                reader, writer = self._connection
                try:
                    await write_pbmsg(writer, request)
                    response = p2pd_pb2.Response()
                    await read_pbmsg_safe(reader, response)
                except (ConnectionError, asyncio.IncompleteReadError):
                    self.close()
                    if attempt:
                        raise
                    continue
                raise_if_failed(response)
                return

    def close(self) -> None:
        if self._connection is not None:
            self._connection[1].close()
            self._connection = None


async def topic_peers(p2p: P2P, topic: str) -> list[str]:
    """The connected peers that subscribe to `topic` (base58 peer ids)."""
    response, _, writer = await _request(p2p, p2pd_pb2.PSRequest(type=p2pd_pb2.PSRequest.LIST_PEERS, topic=topic))
    writer.close()
    return [PeerID(raw).to_base58() for raw in response.pubsub.peerIDs]


async def connect(p2p: P2P, peer_id: str) -> None:
    """Opens a connection to a peer whose addresses p2pd knows (its peerstore or its DHT)."""
    await p2p._client.control.connect(PeerID.from_base58(peer_id), [])


async def disconnect(p2p: P2P, peer_id: str) -> None:
    """Closes every connection to a peer (it may dial again; the caller decides what to do then)."""
    await p2p._client.control.disconnect(PeerID.from_base58(peer_id))
