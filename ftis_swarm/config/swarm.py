"""`SwarmConfig`: the run, this peer's identity, and one section per concern (transport and reach in
transport.py; records and storage, fetch and budget, holders and upload, gossip here), with the old flat
keys moved into their sections (`MOVED_KEYS`)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, ClassVar, Literal, Mapping, Optional

from pydantic import BaseModel, Field, model_validator

from ftis_swarm.config.base import Strict
from ftis_swarm.config.transport import TransportConfig
from ftis_swarm.config.wire import WireConfig

logger = logging.getLogger(__name__)


class PuzzleConfig(Strict):
    """The memory-hard puzzle every identity solves once per run (ftis_swarm/swarm/puzzle.py).

    The same on every peer of a run: a record whose owner's puzzle is not solved at these
    settings is refused. At the defaults one scrypt try takes about 60 ms on one core
    (16 MiB of memory), so an identity costs about 2^bits x 60 ms: some 4 s at 6 bits.
    """

    bits: int = Field(6, ge=0, le=32)
    """Leading zero bits the scrypt digest of (public key, run id, nonce) must have."""
    log2_n: int = Field(14, ge=1, le=20)
    """scrypt's cost N = 2^log2_n; memory is 128 x r x N bytes (16 MiB at 14 and r = 8)."""
    r: int = Field(8, ge=1, le=32)
    """scrypt's block size."""
    verify_rate: float = Field(4.0, gt=0, le=10_000)
    """New identities' puzzles this node verifies per second, sustained (each costs one scrypt);
    a record of an identity over the rate is refused for now (`puzzle_busy`, no fault of anyone)."""
    verify_burst: int = Field(32, ge=1, le=100_000)
    """New identities' puzzles verified at once before `verify_rate` applies."""


class RecordsConfig(Strict):
    """Records and storage: how long records live, the DHT's key scheme, how many peers store each, and what
    this node stores for others (swarm/dht/)."""

    ttl: float = Field(600.0, gt=0)
    """Seconds a published group stays in the DHT; older groups are dropped on gather."""
    max_clock_skew: float = Field(30.0, ge=0)
    """Seconds two peers' clocks may differ: a record may expire at most ttl + this far ahead."""
    window: float = Field(30.0, gt=0)
    """Seconds per time window of the DHT key scheme (the same on every peer of a run)."""
    member_shards: Literal[1, 2, 4, 8, 16] = 1
    """Membership keys per window (the same on every peer of a run); 4 or more past ~1,000 peers."""
    num_replicas: int = Field(5, ge=1, le=64)
    """Peers nearest to a key that are asked to store each pointer."""
    min_replicas: int = Field(1, ge=1, le=64)
    """Peers other than this one that must accept a pointer for a publish to succeed."""
    publish_timeout: float = Field(10.0, gt=0)
    """Seconds a publish may take (finding the nearest peers and storing the pointer)."""
    max_record_bytes: int = Field(4096, ge=256)
    """Most bytes in one signed DHT record (a round pointer of 16 groups, about 1.7 KB); larger records are refused."""
    max_stored_records: int = Field(16384, ge=64)
    """Most records this node stores for others, all keys together (each ~1 KB on the wire, ~2 KB in memory)."""
    max_stored_bytes: int = Field(32 << 20, ge=1 << 20)
    """Most bytes of memory the stored records may take, all keys together: each is charged its subkey
    and value plus 1 KB (`swarm/dht/storage.py`; a pointer ~2 KB, so 32 MiB hold ~16,000)."""
    max_records_per_peer: int = Field(2048, ge=16)
    """Most records this node stores that one peer sent, and that one owner signed."""
    max_records_per_origin: int = Field(4096, ge=16)
    """Most records this node stores that peers of one network origin sent, all together; the peers
    reached through a relay count as one origin (a global cap: a relay's address is not theirs)."""
    store_rate: float = Field(8.0, gt=0)
    """Records a second one peer may ask this node to store (a token bucket of `store_burst`, per peer, not
    per origin: peers behind one address must not share it with a crowd); the rest of a request is refused
    as `store_rate`, unchecked and no one's fault. An honest node stores two records a round on each
    replica; a fill is slowed to this rate, and so is what its signature checks cost this node
    (`swarm/dht/guard.py`)."""
    store_burst: int = Field(256, ge=16)
    """Records one peer may store at once before `store_rate` paces it (one request of hivemind's replication
    push, a key's whole dictionary, counts each record)."""
    storage_reserve: float = Field(0.25, ge=0.0, lt=1.0)
    """Share of `max_stored_records` and `max_stored_bytes` that only known publishers' records may take
    (peers the policy scores, and owners that stored their own records here `known_publisher_after` s
    before): a fill by new identities cannot take it (`swarm/dht/storage.py`)."""
    known_publisher_after: float = Field(60.0, ge=0.0)
    """Seconds after an owner's first own record is stored here that it counts as a known publisher
    (rank 2: new identities never evict its records; it may use the reserve)."""


class FetchConfig(Strict):
    """Fetch and budget: how the background gatherer reads the DHT, and how it fetches peers' bodies
    (swarm/fetch/)."""

    poll_interval: float = Field(1.0, gt=0, le=60)
    """Seconds between two ticks of the background gatherer (re-reads, fetch back-off); with gossip
    off, also between two reads of the DHT's membership keys."""
    dht_poll_interval: float = Field(5.0, gt=0, le=600)
    """Seconds between two reads of the DHT's membership keys while gossip is on (the fallback)."""
    member_read_rate: float = Field(16.0, gt=0)
    """Records a second that reading one peer's pointer key of a window may cost this node: after a read
    that returned n records, that key is not read again for n / member_read_rate seconds, whatever its
    membership record claims. An honest key holds a window's few round pointers; a key filled with a
    thousand valid pointers is read about once a minute, not at every membership read (each read of it
    costs this node, and the peers it asks, a 1 MiB reply: docs/swarm.md, "Gathering")."""
    max_groups_per_peer_per_gather: int = Field(16, ge=1)
    """Most groups one peer may contribute to one gather; its further groups wait for the next one.
    A node lowers it to its `learner.max_groups_per_peer` when that is smaller."""
    fetch_timeout: float = Field(10.0, gt=0)
    """Seconds to fetch one group body from its publisher before the attempt counts as failed."""
    max_fetch_attempts: int = Field(3, ge=1)
    """Failed fetches of one body, or failed fetches in a row from one publisher (then all its pending
    bodies), before they are rejected as `fetch_failed` (or `stalled`)."""
    max_concurrent_fetches: int = Field(8, ge=2, le=256)
    """Body streams open at once, for all publishers together (half of them at most for unproven ones);
    each carries up to `max_bodies_per_stream` bodies of one source."""
    max_fetches_per_peer: int = Field(2, ge=1, le=255)
    """Body streams open at once for one publisher's groups; below max_concurrent_fetches, so no one holds
    every slot."""
    max_fetches_per_origin: int = Field(4, ge=1, le=255)
    """Body streams open at once to publishers of one network origin (the relayed ones as one)."""
    max_bodies_per_stream: int = Field(8, ge=1, le=32)
    """Bodies this node asks one source for in one stream (`fetch.streams`; 32: what a server takes): a
    stream's set-up (~20 ms) is paid once for them, and each body still has its own clock. 1: one
    body per stream."""
    first_byte_timeout: float = Field(3.0, gt=0)
    """Seconds from asking for a body to its header (and between two reads of it): longer is a stall."""
    min_body_rate: int = Field(256 * 1024, ge=1024)
    """Bytes per second a body must at least arrive at; slower is a stall (`fetch_timeout` bounds it too)."""
    other_tokenizers: bool = True
    """Fetch groups of peers with another tokenizer whose pointer signs that they carry alignment data
    (`RoundPointer.aligned`; docs/method.md, "Peers with another tokenizer"; the node trains on them when
    `learner.cross_tokenizer` is on). Another tokenizer's pointer without that flag is refused unfetched as
    `tokenizer`, no one's fault; a body without alignment data under the flag is `pointer_mismatch`. False: every
    pointer of another tokenizer is refused unfetched."""

    @model_validator(mode="after")
    def _fetch_slots(self) -> "FetchConfig":
        if self.max_fetches_per_peer >= self.max_concurrent_fetches:
            raise ValueError(
                f"max_fetches_per_peer={self.max_fetches_per_peer} must be below "
                f"max_concurrent_fetches={self.max_concurrent_fetches}"
            )
        return self


class HoldersConfig(Strict):
    """Holders and upload: the bodies this node serves, its own and other peers' it holds, and how much it
    uploads (swarm/fetch/bodies.py, swarm/gossip/haves.py)."""

    hold_bytes: int = Field(64 << 20, ge=0, le=16 << 30)
    """Bytes of other peers' accepted bodies this node keeps and serves (`fetch.bodies`: holders), each
    until its pointer expires, the oldest dropped first; 0: it holds and announces none."""
    max_holder_serves: int = Field(4, ge=0, le=64)
    """Held bodies (other peers') this node serves at once; more are answered busy. 0: it serves and
    announces none (it still keeps them, within `hold_bytes`)."""
    have_interval: float = Field(10.0, gt=0, le=600)
    """Seconds between two gossiped announcements of the bodies this node holds while they stay the same
    (`records.HaveRecord`); a change is announced within a quarter of it (`gossip.haves`)."""
    max_streams_per_peer: int = Field(4, ge=1, le=64)
    """Body streams this node serves at once to one requester; further requests are answered busy."""
    upload_bytes_per_window: int = Field(0, ge=0)
    """Body bytes this node serves per `upload_window` s, its own and held ones together (its own first,
    held ones within half of it; one own body is always sent while the window is below the cap, so
    at most the cap plus one body goes out a window); past it requests are answered busy. 0: no cap."""
    upload_window: float = Field(10.0, gt=0, le=3600)
    """Seconds of one upload window (`upload_bytes_per_window`)."""


class GossipConfig(Strict):
    """Gossip: each signed pointer pushed to the run's peers over gossipsub (swarm/gossip/)."""

    enabled: bool = True
    """Push each signed pointer to the run's peers over gossipsub (p2pd's pubsub) the moment it is
    published; the DHT stays for discovery, late joiners and pointers gossip missed. False: poll only."""
    rate: float = Field(4.0, gt=0, le=1000)
    """Pointers per second one sender may gossip, sustained (after `burst`); more are dropped."""
    burst: int = Field(64, ge=1, le=4096)
    """Pointers one sender may gossip at once (a round's groups); a sender that goes on dropping
    more than this past its rate is disconnected and ignored for a while."""


SWARM_SECTIONS: dict[str, type[Strict]] = {"transport": TransportConfig, "records": RecordsConfig,
                                            "fetch": FetchConfig, "holders": HoldersConfig, "gossip": GossipConfig}
"""The sections of `SwarmConfig`, by key."""
_RENAMED = {"gossip": "enabled", "gossip_rate": "rate", "gossip_burst": "burst"}
"""Flat keys of SwarmConfig whose name changed as they moved into their section."""


def _moved_keys() -> dict[str, str]:
    """{flat key of the old SwarmConfig: its path now}, from the sections' own fields (a key added to a section
    later gets a flat spelling too, which is harmless)."""
    old_name = {new: old for old, new in _RENAMED.items()}
    return {old_name.get(name, name): f"{section}.{name}" for section, model in SWARM_SECTIONS.items()
            for name in model.model_fields}


def _is_flat(key: str, value: Any) -> bool:
    """Whether `key` with `value` is an old flat key of SwarmConfig (`gossip` was a bool; now it is a section)."""
    return key in SwarmConfig.MOVED_KEYS and not (key in SWARM_SECTIONS and isinstance(value, (dict, BaseModel)))


def moved_key_sentence(old: str, new: str) -> str:
    """The one WARNING sentence for a config key that moved (`swarm.ttl` -> `swarm.records.ttl`)."""
    return f"{old} is deprecated: it is now {new} (the old key still works, for now)"


def _moved_keys_sentence(pairs: list[tuple[str, str]]) -> str:
    """One WARNING sentence for the old keys of one config (an old `config.json` holds them all)."""
    if len(pairs) == 1:
        return moved_key_sentence(f"config key {pairs[0][0]}", pairs[0][1])
    shown, rest = pairs[:3], len(pairs) - 3

    def listed(names: list[str], tail: str) -> str:
        return ", ".join(names[:-1]) + f" and {names[-1]}" if rest <= 0 else ", ".join(names) + tail

    olds = listed([old for old, _ in shown], f" and {rest} more")
    news = listed([new for _, new in shown], " and so on")
    return f"config keys {olds} are deprecated: they are now {news} (the old keys still work, for now)"


class SwarmConfig(Strict):
    """The hivemind side of a node (ftis_swarm.swarm): the run, this peer's identity, and one section per concern.

    The keys of the sections were flat keys of this model (`swarm.ttl`, now `swarm.records.ttl`);
    a flat key still loads, from a file, the environment, `--set` or a keyword, into its section,
    with one WARNING sentence naming its new key (`MOVED_KEYS`).
    """

    MOVED_KEYS: ClassVar[dict[str, str]] = _moved_keys()
    """{old flat key: its path in a section} (`gossip_rate` -> `gossip.rate`)."""

    run_id: str = Field("ftis-default", min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._-]+$")
    """Swarm run name: only groups of the same run id are exchanged."""
    identity: Optional[Path] = None
    """Private-key file (its puzzle beside it, `<file>.puzzle`); created on first start and kept,
    so the peer id and its standing survive a restart. None: `identity.key` in the node's
    run directory (a process without one, such as `ftis-node bootstrap`, makes a fresh one)."""
    puzzle: PuzzleConfig = Field(default_factory=PuzzleConfig)
    wire: WireConfig = Field(default_factory=WireConfig)
    transport: TransportConfig = Field(default_factory=TransportConfig)
    records: RecordsConfig = Field(default_factory=RecordsConfig)
    fetch: FetchConfig = Field(default_factory=FetchConfig)
    holders: HoldersConfig = Field(default_factory=HoldersConfig)
    gossip: GossipConfig = Field(default_factory=GossipConfig)

    @model_validator(mode="before")
    @classmethod
    def _flat_keys(cls, data: Any) -> Any:
        return cls.sectioned(data) if isinstance(data, dict) else data

    @classmethod
    def sectioned(cls, data: dict, *, warn: bool = True) -> dict:
        """`data` (SwarmConfig's keys) with each old flat key moved into its section, and (`warn`) one WARNING
        sentence for them; ValueError for an old key whose new key is also set, to another value."""
        data = dict(data)
        flat = {key: data.pop(key) for key in [k for k, v in data.items() if _is_flat(k, v)]}
        moved = []
        for old, value in flat.items():
            section, name = cls.MOVED_KEYS[old].split(".")
            keys = data.get(section) or {}
            if isinstance(keys, BaseModel):
                keys = keys.model_dump(exclude_unset=True)
            if not isinstance(keys, dict):
                data[old] = value  # the section itself is not a table: validation says so
                continue
            if name in keys and keys[name] != value:
                raise ValueError(f"swarm.{old} is deprecated and swarm.{section}.{name} is also set, to another "
                                 f"value: keep swarm.{section}.{name} alone")
            data[section] = {**keys, name: value}
            moved.append((f"swarm.{old}", f"swarm.{section}.{name}"))
        if moved and warn:
            logger.warning(_moved_keys_sentence(moved))
        return data

    @model_validator(mode="after")
    def _holding(self) -> "SwarmConfig":
        hold = self.holders.hold_bytes
        if 0 < hold < self.wire.max_bytes:
            raise ValueError(f"holders.hold_bytes={hold} must be 0 or at least wire.max_bytes={self.wire.max_bytes}")
        return self

    def model_copy(self, *, update: Optional[Mapping[str, Any]] = None, deep: bool = False) -> "SwarmConfig":
        """pydantic's copy, which also takes an old flat key (`update={"ttl": 60}`) into its section, with one
        WARNING sentence."""
        flat = {k: v for k, v in (update or {}).items() if _is_flat(k, v)}
        if not flat:
            return super().model_copy(update=update, deep=deep)
        logger.warning(_moved_keys_sentence([(f"swarm.{k}", f"swarm.{self.MOVED_KEYS[k]}") for k in flat]))
        sections: dict[str, dict[str, Any]] = {}
        for key, value in flat.items():
            section, name = self.MOVED_KEYS[key].split(".")
            sections.setdefault(section, {})[name] = value
        rest = {k: v for k, v in (update or {}).items() if k not in flat}
        copy = super().model_copy(update=rest, deep=deep)
        return copy.replace(**sections)

    def replace(self, **sections: Mapping[str, Any]) -> "SwarmConfig":
        """A copy with keys of some sections changed, unvalidated as `model_copy` is:
        `cfg.replace(transport={"port": 4001}, gossip={"enabled": False})`."""
        return self.model_copy(update={name: getattr(self, name).model_copy(update=dict(keys))
                                       for name, keys in sections.items()})
