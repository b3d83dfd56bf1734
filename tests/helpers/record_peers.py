"""Identities that sign swarm records as honest publishers do, and a settable peer policy (no network)."""

from __future__ import annotations

import dataclasses
import secrets
import time

from hivemind.dht.protocol import DHTProtocol
from hivemind.dht.validation import DHTRecord
from hivemind.utils.crypto import RSAPrivateKey

from ftis_swarm.config import PuzzleConfig
from ftis_swarm.swarm.dht.validators import RecordChecker
from ftis_swarm.swarm.identity import peer_id_from_public_key
from ftis_swarm.swarm.keys import MEMBER_SUBKEY_NAME, key_id, member_key, member_shard, pointer_key
from ftis_swarm.swarm.puzzle import PuzzleVerifier, solve
from ftis_swarm.swarm.records import RECORD_VERSION, make_subkey, round_name

SER = DHTProtocol.serializer
TTL, SKEW, RUN, W = 600.0, 30.0, "run", 7
PUZZLE = PuzzleConfig(bits=2, log2_n=6, r=1)
"""The tests' puzzle: a few tries of a tiny scrypt."""


class Peer:
    """An identity that signs records, as an honest publisher would."""

    def __init__(self) -> None:
        self.key = RSAPrivateKey()
        self.public_key = self.key.get_public_key().to_bytes()
        self.peer_id = peer_id_from_public_key(self.public_key)
        self.puzzle, _ = solve(self.public_key, RUN, PUZZLE)
        self.checker = RecordChecker(self.key, puzzles=PuzzleVerifier(PUZZLE), max_record_bytes=4096, ttl=TTL,
                                     max_clock_skew=SKEW)

    def pointer(self, *, n_groups: int = 1, **changes: object) -> DHTRecord:
        """A round pointer of `n_groups` groups (a random round unless `round` is given); a change
        named like a group's field (`size`, `sha256`, `created_at`, `tokens`) applies to its first group."""
        groups = [{"sha256": secrets.token_bytes(32), "size": 100, "created_at": time.time(), "tokens": 64}
                  for _ in range(n_groups)]
        for name in [n for n in changes if n in groups[0]]:
            groups[0][name] = changes.pop(name)
        number = secrets.randbelow(10 ** 9)
        value = {"v": RECORD_VERSION, "publisher": self.peer_id, "run_id": RUN, "tokenizer_fp": "tok", "window": W,
                 "round": number, "groups": groups, "puzzle": self.puzzle}
        key = changes.pop("key", pointer_key(RUN, self.peer_id, W))
        value.update(changes)
        named = value["round"] if type(value["round"]) is int and value["round"] >= 0 else number
        return self.sign(key, make_subkey(self.public_key, round_name(named)), value)

    def member(self, **changes: object) -> DHTRecord:
        value = {"v": RECORD_VERSION, "publisher": self.peer_id, "run_id": RUN, "window": W, "shards": 4,
                 "groups": 3, "updated_at": time.time(), "puzzle": self.puzzle}
        key = changes.pop("key", member_key(RUN, W, member_shard(self.peer_id, 4)))
        return self.sign(key, make_subkey(self.public_key, MEMBER_SUBKEY_NAME), {**value, **changes})

    def sign(self, key: str, subkey: bytes, value: object, expiration: float | None = None) -> DHTRecord:
        record = DHTRecord(key_id(key).to_bytes(), SER.dumps(subkey), SER.dumps(value),
                           time.time() + TTL if expiration is None else expiration)
        return dataclasses.replace(record, value=self.checker.sign_value(record))


class Scores:
    """A peer policy the test sets: scores by peer, and the peers it denies."""

    def __init__(self) -> None:
        self.scores: dict[str, float] = {}
        self.denied: set[str] = set()

    def allows(self, peer_id: str) -> bool:
        return peer_id not in self.denied

    def score(self, peer_id: str) -> float:
        return self.scores.get(peer_id, 0.0)
