"""The gossip gate and the round tracker on real signed records (no network)."""

from __future__ import annotations

import dataclasses
import secrets
import time

import msgpack
from record_peers import RUN, SER, TTL, Peer, Scores, W

from ftis_swarm.config import LedgerConfig
from ftis_swarm.swarm.fetch.rounds import RoundTracker
from ftis_swarm.swarm.gossip.gate import MAX_MESSAGE_BYTES, GossipGate, decode_message, encode_message
from ftis_swarm.swarm.keys import pointer_key
from ftis_swarm.swarm.records import RECORD_VERSION, GroupPointer, RoundPointer


def _gate(bob: Peer, policy: Scores, *, rate: float = 100.0, burst: int = 1000) -> GossipGate:
    return GossipGate(checker=bob.checker, policy=policy, rate=rate, burst=burst, ttl=TTL)


def test_a_gossiped_pointer_is_checked_like_a_dht_record_and_each_refusal_named(alice, bob):
    policy = Scores()
    gate = _gate(bob, policy)
    record = alice.pointer(round=5, n_groups=3)
    message = encode_message(record)
    assert decode_message(message) == record
    assert 900 < len(message) < 1300  # one round of 3 groups in one message; the owner's RSA key is 0.4 KB of it
    assert len(encode_message(alice.pointer(n_groups=32))) < MAX_MESSAGE_BYTES
    now = time.time()
    admitted = gate.admit(alice.peer_id, message, now)
    assert admitted.reason == "" and admitted.record.owner == alice.peer_id
    assert isinstance(admitted.record.content, RoundPointer)
    views = admitted.record.content.views()
    assert [(v.round, v.round_groups, v.publisher) for v in views] == [(5, 3, alice.peer_id)] * 3
    assert len({v.group_id for v in views}) == 3 and all(v.sha256.startswith(v.group_id) for v in views)

    mine = alice.pointer()
    unsigned = dataclasses.replace(mine, value=bob.checker.strip_value(mine))
    far = alice.sign(pointer_key(RUN, alice.peer_id, W), SER.loads(mine.subkey),
                     SER.loads(bob.checker.strip_value(mine)), now + 10 * TTL)
    refusals = {
        "oversize": b"\x95" + b"x" * MAX_MESSAGE_BYTES,
        "bad_message": msgpack.packb([2, mine.key, mine.subkey, mine.value, mine.expiration_time]),
        "not_pointer_form": encode_message(dataclasses.replace(mine, subkey=SER.dumps(b"plain"))),
        "not_pointer": encode_message(alice.member()),
        "replayed": message,
        "bad_signature": encode_message(unsigned),
        "far_expiry": encode_message(far),
        "unbound_key": encode_message(alice.pointer(key=pointer_key(RUN, bob.peer_id, W))),
        "bad_schema": encode_message(alice.pointer(round=-1)),
    }
    assert {name: gate.admit(alice.peer_id, data, now).reason for name, data in refusals.items()} == {
        name: "gossip_" + name for name in refusals}
    assert gate.admit(bob.peer_id, encode_message(alice.pointer()), now).reason == "gossip_not_sender"  # a relayed replay
    policy.denied.add(alice.peer_id)
    assert gate.admit(alice.peer_id, encode_message(alice.pointer()), now).reason == "gossip_denied"


def test_each_sender_has_its_rate_and_one_that_goes_on_is_banned_and_disconnected(alice, bob):
    gate = _gate(bob, Scores(), rate=1.0, burst=4)
    junk, t = b"junk", 1000.0
    # a token lets a message through to the next check (here: it does not decode); without one it is dropped
    assert [gate.admit("flooder", junk, t).reason for _ in range(5)] == ["gossip_bad_message"] * 4 + ["gossip_rate"]
    assert gate.admit("flooder", junk, t + 1.0).reason == "gossip_bad_message"  # one token a second
    assert gate.admit("honest", junk, t + 1.0).reason == "gossip_bad_message"  # every sender has its own bucket
    drops = [gate.admit("flooder", junk, t + 1.0) for _ in range(4)]
    assert [(a.reason, a.disconnect) for a in drops] == [("gossip_rate", False)] * 3 + [("gossip_rate", True)]  # 5 > burst
    assert (gate.admit("flooder", junk, t + 2.0).reason, gate.admit("flooder", junk, t + 3.0).disconnect) == (
        "gossip_banned", False)
    assert gate.admit("flooder", junk, t + 7.0).disconnect  # again while it sends, every 5 s at most
    assert gate.admit("honest", junk, t + 7.0).reason == "gossip_bad_message"
    assert gate.admit("flooder", junk, t + 32.0).reason == "gossip_bad_message"  # the first ban lasts 30 s
    for _ in range(3 + 5):  # its 3 tokens left, then 5 drops: more than its burst again
        last = gate.admit("flooder", junk, t + 32.0)
    assert last.disconnect and gate.admit("flooder", junk, t + 32.0 + 59.0).reason == "gossip_banned"  # the second: 60 s
    assert gate.admit("flooder", junk, t + 32.0 + 61.0).reason == "gossip_bad_message"


def _pointer(publisher: str, *, round: int, groups: int, created_at: float) -> GroupPointer:
    gid = secrets.token_hex(16)
    return GroupPointer(v=RECORD_VERSION, group_id=gid, size=100, sha256=gid + "0" * 32, publisher=publisher,
                        created_at=created_at, run_id=RUN, tokenizer_fp="tok", window=W, round=round,
                        round_groups=groups, puzzle="0" * 16)


def test_a_gather_is_owed_each_live_proven_peers_next_round(alice, bob):
    tracker, now, horizon = RoundTracker(max_clock_skew=5.0), 10_000.0, 8.0
    nobody = lambda peer: False  # noqa: E731 - no peer scored by the policy

    def owed(at: float = now, scored=nobody) -> list[str]:
        return tracker.owed(now=at, horizon=horizon, scored=scored)

    p = alice.peer_id
    first, second = (_pointer(p, round=3, groups=2, created_at=now) for _ in range(2))
    tracker.note(first, now=now)
    assert owed() == []  # a stranger holds no gather up
    assert owed(scored=lambda peer: peer == p) == [p]  # unless the policy scores it
    tracker.settle(first, accepted=True)
    assert owed() == [p]  # proven now, and 1 of its 2 groups is in
    tracker.note(second, now=now)
    tracker.settle(second, accepted=False)  # rejected counts as in: nothing more to wait for
    assert owed() == []
    tracker.consume()  # a gather of a round handed round 3 out
    assert owed() == [p]  # the next gather waits for its next round, whatever its number
    third = _pointer(p, round=9, groups=1, created_at=now + 1)
    tracker.note(third, now=now + 1)
    assert owed(now + 1) == [p]
    tracker.settle(third, accepted=True)
    assert owed(now + 1) == []
    tracker.consume()
    assert owed(now + 1) == [p]
    assert owed(now + 1 + horizon + 0.1) == []  # silent for the horizon: no longer live

    late = _pointer(bob.peer_id, round=1, groups=5, created_at=now - 100)  # an old pointer, read now
    tracker.note(late, now=now)
    tracker.settle(late, accepted=True)
    assert bob.peer_id not in owed()  # its signed creation time says it is not live
    tracker.forget(now=now + TTL + 10, ttl=TTL)
    assert owed(now + TTL + 10, scored=lambda peer: True) == []


def test_the_gates_ban_reads_its_length_from_the_ledger_config(alice, bob):
    bans = LedgerConfig(gossip_ban_seconds=4.0, max_ban_seconds=6.0)
    gate = GossipGate(checker=bob.checker, policy=Scores(), rate=1.0, burst=2, ttl=TTL,
                      ban_seconds=bans.gossip_ban_seconds, max_ban_seconds=bans.max_ban_seconds)
    junk, t = b"junk", 1000.0
    for _ in range(2 + 3):  # its 2 tokens, then 3 drops: more than its burst
        gate.admit("flooder", junk, t)
    assert gate.admit("flooder", junk, t + 3.9).reason == "gossip_banned"
    assert gate.admit("flooder", junk, t + 4.1).reason == "gossip_bad_message"  # 4 s, not the default 30 s
    for _ in range(3 + 3):
        gate.admit("flooder", junk, t + 4.1)
    assert gate.admit("flooder", junk, t + 4.1 + 5.9).reason == "gossip_banned"
    assert gate.admit("flooder", junk, t + 4.1 + 6.1).reason == "gossip_bad_message"  # 8 s, capped at 6
