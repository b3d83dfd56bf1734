"""The gossip gate against replays relayed by a third party, and newcomers after a flood of bad puzzles
(real signed records, the real record checker and puzzle verifier; no network)."""

from __future__ import annotations

import time
from collections import Counter

from record_peers import PUZZLE, RUN, SER, SKEW, TTL, Peer, Scores, W

from ftis_swarm.config import GossipConfig
from ftis_swarm.swarm.counters import SwarmCounters
from ftis_swarm.swarm.dht.validators import RecordChecker
from ftis_swarm.swarm.gossip import gate as gate_module
from ftis_swarm.swarm.gossip.channel import GossipChannel
from ftis_swarm.swarm.gossip.gate import GossipGate, encode_message
from ftis_swarm.swarm.gossip.pubsub import TopicMessage
from ftis_swarm.swarm.keys import pointer_key
from ftis_swarm.swarm.puzzle import PuzzleVerifier, solves

DEFAULTS = GossipConfig()
REPLAYS = 1000


def _gate(checker: RecordChecker, *, rate: float = DEFAULTS.rate,
          burst: int = DEFAULTS.burst) -> GossipGate:
    return GossipGate(checker=checker, policy=Scores(), rate=rate, burst=burst, ttl=TTL)


def _checker(verifier: PuzzleVerifier) -> RecordChecker:
    return RecordChecker(Peer().key, puzzles=verifier, max_record_bytes=4096, ttl=TTL, max_clock_skew=SKEW)


def _failing_nonces(peer: Peer, n: int) -> list[str]:
    """`n` nonces that do not solve `peer`'s puzzle."""
    candidates = (f"{i:016x}" for i in range(100 * n))
    return [nonce for nonce, _ in zip((c for c in candidates if not solves(peer.public_key, RUN, c, PUZZLE)),
                                      range(n))]


def test_old_messages_relayed_by_another_cost_their_signer_nothing(bob, monkeypatch):
    monkeypatch.setattr(gate_module, "MAX_REMEMBERED", 100)  # 900 of the 1,000 fall out of the gate's memory
    alice = Peer()
    gate, t = _gate(bob.checker), time.time()
    messages = [encode_message(alice.pointer()) for _ in range(REPLAYS)]
    admitted = [gate.admit(alice.peer_id, m, t + i / DEFAULTS.rate) for i, m in enumerate(messages)]
    assert [a.reason for a in admitted] == [""] * REPLAYS  # sent at the rate a sender may use
    t += REPLAYS / DEFAULTS.rate + 130.0  # past p2pd's seen-message cache: p2pd delivers them again
    replays = [gate.admit(alice.peer_id, m, t + i / 60) for i, m in enumerate(messages)]  # relayed at 60 a second
    assert Counter(v.reason for v in replays) == {"gossip_replayed": REPLAYS}  # 0 rate drops, 0 bans
    assert not any(v.disconnect for v in replays)
    t += REPLAYS / 60
    fresh = [gate.admit(alice.peer_id, encode_message(alice.pointer()), t) for _ in range(DEFAULTS.burst)]
    assert [v.reason for v in fresh] == [""] * DEFAULTS.burst  # its whole burst is still its own

    # a record of alice's gossiped by bob is bob's message: a refusal charged to bob, old or not
    assert gate.admit(bob.peer_id, messages[0], t).reason == "gossip_not_sender"
    assert gate.admit(bob.peer_id, messages[-1], t).reason == "gossip_not_sender"


def test_a_flood_of_new_records_is_still_limited_banned_and_disconnected_and_replays_do_not_add_to_it(bob):
    carol, burst, t = Peer(), DEFAULTS.burst, time.time()
    gate = _gate(bob.checker)
    new = [encode_message(carol.pointer()) for _ in range(2 * burst + 2)]
    verdicts = [gate.admit(carol.peer_id, m, t) for m in new]
    assert [v.reason for v in verdicts[:burst]] == [""] * burst
    assert [v.reason for v in verdicts[burst:2 * burst]] == ["gossip_rate"] * burst
    assert (verdicts[2 * burst].reason, verdicts[2 * burst].disconnect) == ("gossip_rate", True)  # drops > burst
    assert verdicts[2 * burst + 1].reason == "gossip_banned"
    replayed = gate.admit(carol.peer_id, new[0], t + 6.0)  # one of its own, relayed while it is banned
    assert (replayed.reason, replayed.disconnect) == ("gossip_replayed", False)
    assert gate.admit(carol.peer_id, new[-1], t + 6.0).disconnect  # a new one: banned, and cut again


def test_an_expired_record_is_refused_as_a_replay_without_a_token(bob):
    dave, t = Peer(), time.time()
    gate = _gate(bob.checker, rate=0.001, burst=1)
    live = dave.pointer()
    expired = dave.sign(pointer_key(RUN, dave.peer_id, W), SER.loads(live.subkey),
                        SER.loads(bob.checker.strip_value(live)), t - 1.0)
    assert gate.admit(dave.peer_id, encode_message(expired), t).reason == "gossip_replayed"
    assert gate.admit(dave.peer_id, encode_message(live), t).reason == ""  # its one token was left


def test_a_newcomer_that_only_gossips_is_admitted_after_a_flood_of_bad_puzzles():
    clock = [0.0]
    verifier = PuzzleVerifier(PUZZLE.model_copy(update={"verify_rate": 1.0, "verify_burst": 4}),
                              clock=lambda: clock[0])
    gate, t = _gate(_checker(verifier)), time.time()
    flood = [Peer() for _ in range(10)]
    for peer in flood:
        bad = _failing_nonces(peer, 1)[0]
        for _ in range(2):
            gate.admit(peer.peer_id, encode_message(peer.pointer(puzzle=bad)), t)
    assert verifier.verified == 4 and gate.waiting == 12  # the burst spent; 6 keys' messages wait
    newcomer = Peer()
    record = newcomer.pointer()
    assert gate.admit(newcomer.peer_id, encode_message(record), t).reason == "puzzle_busy"
    assert gate.waiting == 13
    seen: list[tuple[str, str]] = []
    for second in range(1, 30):
        clock[0] = float(second)
        seen += [(sender, v.reason) for sender, v in gate.retry(t + second)]
        if (newcomer.peer_id, "") in seen:
            break
    assert second == 7  # one flood key a second, in the order they came, then the newcomer
    assert Counter(seen) == {**{(p.peer_id, "gossip_bad_puzzle"): 2 for p in flood[4:]}, (newcomer.peer_id, ""): 1}
    assert gate.waiting == 0


def test_fresh_nonces_of_a_key_that_showed_a_bad_one_leave_unknown_identities_half_the_burst():
    clock = [0.0]
    verifier = PuzzleVerifier(PUZZLE.model_copy(update={"verify_rate": 1.0, "verify_burst": 8}),
                              clock=lambda: clock[0])
    mallory = Peer()
    nonces = iter(_failing_nonces(mallory, 45))
    assert [verifier.check(mallory.public_key, RUN, next(nonces)) for _ in range(5)] == ["bad_puzzle"] * 4 + [
        "puzzle_busy"]  # a new key first, then a suspect's nonces only while more than 4 of the 8 tokens are left
    assert verifier.suspect(mallory.public_key) and verifier.verified == 4
    newcomers = [Peer() for _ in range(10)]
    for second, newcomer in enumerate(newcomers, start=1):  # 4 fresh bad nonces a second, and one newcomer
        clock[0] = float(second)
        for _ in range(4):
            verifier.check(mallory.public_key, RUN, next(nonces))
        assert not verifier.suspect(newcomer.public_key)
        assert verifier.check(newcomer.public_key, RUN, newcomer.puzzle) == ""  # never busy for an unknown key
    assert verifier.verified == 4 + 1 + 10  # mallory's fifth nonce at the first second, then none


def test_the_messages_waiting_for_the_verifier_are_bounded_per_sender_and_in_all(monkeypatch):
    monkeypatch.setattr(gate_module, "MAX_WAITING", 4)
    clock = [0.0]
    verifier = PuzzleVerifier(PUZZLE.model_copy(update={"verify_rate": 1.0, "verify_burst": 1}),
                              clock=lambda: clock[0])
    gate, t = _gate(_checker(verifier)), time.time()
    first = Peer()
    assert gate.admit(first.peer_id, encode_message(first.pointer()), t).reason == ""  # the one token
    erin = Peer()
    rounds = [11, 12, 13]
    for number in rounds:
        assert gate.admit(erin.peer_id, encode_message(erin.pointer(round=number)), t).reason == "puzzle_busy"
    assert gate.waiting == 2  # its newest two
    others = [Peer() for _ in range(3)]
    for peer in others:
        assert gate.admit(peer.peer_id, encode_message(peer.pointer()), t).reason == "puzzle_busy"
    assert gate.waiting == 4  # full: the last one was not kept
    out = []
    for second in (1, 2):  # a token a second; a message of an identity verified meanwhile needs none
        clock[0] = float(second)
        out += gate.retry(t)
    assert [(sender, v.reason) for sender, v in out] == [(erin.peer_id, ""), (erin.peer_id, ""),
                                                        (others[0].peer_id, "")]
    assert [v.record.content.round for _, v in out[:2]] == rounds[1:]
    assert gate.waiting == 1
    suspect = Peer()
    nonces = _failing_nonces(suspect, 2)
    clock[0] = 3.0
    assert gate.admit(suspect.peer_id, encode_message(suspect.pointer(puzzle=nonces[0])), t).reason == (
        "gossip_bad_puzzle")
    assert gate.admit(suspect.peer_id, encode_message(suspect.pointer(puzzle=nonces[1])), t).reason == "puzzle_busy"
    assert gate.waiting == 1  # a key that showed a bad nonce waits nowhere


def test_the_channel_hands_a_message_checked_late_to_the_gatherer():
    clock = [0.0]
    verifier = PuzzleVerifier(PUZZLE.model_copy(update={"verify_rate": 1.0, "verify_burst": 2}),
                              clock=lambda: clock[0])
    counters, pointers = SwarmCounters(), []
    channel = GossipChannel(p2p=None, topic="t", gate=_gate(_checker(verifier)), self_id="me", counters=counters,
                            on_pointer=pointers.append)
    flood = [Peer() for _ in range(3)]
    for peer in flood:
        channel._receive(TopicMessage(peer.peer_id, encode_message(peer.pointer(puzzle=_failing_nonces(peer, 1)[0]))))
    newcomer = Peer()
    channel._receive(TopicMessage(newcomer.peer_id, encode_message(newcomer.pointer())))
    assert pointers == [] and counters.snapshot()["puzzle_busy"] == 2
    clock[0] = 2.0
    channel._receive(TopicMessage("someone", b"junk"))  # those waiting are checked before it
    assert [p.owner for p in pointers] == [newcomer.peer_id]
    assert counters.snapshot()["faults"] == {"gossip_bad_puzzle": 3, "gossip_bad_message": 1}
