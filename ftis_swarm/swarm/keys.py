"""The DHT key layout: each peer's pointers under its own key, found through membership keys.

    ftis/<run id>/members/<w>/<s>     one membership record per peer that published in window w
    ftis/<run id>/groups/<peer id>/<w>  that peer's pointers of window w, one subkey per group
    ftis/<run id>/pointers            the run's gossip topic: each pointer again, pushed as published

`w = floor(publish time / window)`; `s = member_shard(peer id, shards)`. Every record names
the window (and, for a membership record, the shard count) it was stored under, and its
key must be the one these functions give for its owner: a record under any other key is
refused (`validators`). So one peer's pointers never share a key with another's, a flood
of pointers lands under the flooder's own keys, and membership keys hold at most one
record per identity. Records are self-contained (key, subkey, signed value, expiry): the
same checks apply to a record read from the DHT and to one that arrives any other way.
"""

from __future__ import annotations

import hashlib
import math

from hivemind.dht.routing import DHTID

MEMBER_SUBKEY_NAME = "member"
SHARD_COUNTS = (1, 2, 4, 8, 16)


def window_of(timestamp: float, window: float) -> int:
    """The index of the time window that holds `timestamp`."""
    return math.floor(timestamp / window)


def windows_between(start: float, end: float, window: float) -> list[int]:
    """Every window index that overlaps [start, end], oldest first."""
    return list(range(window_of(start, window), window_of(end, window) + 1))


def member_shard(peer_id: str, shards: int) -> int:
    """Which of `shards` membership keys holds this peer (stable for a peer id)."""
    if shards not in SHARD_COUNTS:
        raise ValueError(f"shards must be one of {SHARD_COUNTS}")
    return hashlib.sha256(peer_id.encode()).digest()[0] % shards


def member_key(run_id: str, w: int, shard: int) -> str:
    return f"ftis/{run_id}/members/{w}/{shard}"


def pointer_key(run_id: str, peer_id: str, w: int) -> str:
    return f"ftis/{run_id}/groups/{peer_id}/{w}"


def gossip_topic(run_id: str) -> str:
    """The gossipsub topic on which a run's peers push their pointers (`gossip`)."""
    return f"ftis/{run_id}/pointers"


def key_id(key: str) -> DHTID:
    """The DHT id a key is stored under (hivemind's hash of the key string)."""
    return DHTID.generate(source=key)
