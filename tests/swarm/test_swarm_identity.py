"""What an identity costs: its puzzle, solved once and kept beside the key, checked in every record
(no network; the persistent default identity of a node is checked in tests/node)."""

from __future__ import annotations

import json

from record_peers import PUZZLE, RUN, SER, Peer

from ftis_swarm.config import PuzzleConfig
from ftis_swarm.swarm.identity import NodeIdentity
from ftis_swarm.swarm.keys import pointer_key
from ftis_swarm.swarm.puzzle import PuzzleVerifier, load_or_solve, puzzle_path, solve, solves


def _failing_nonce(peer: Peer, cfg: PuzzleConfig = PUZZLE) -> str:
    return next(n for n in (f"{i:016x}" for i in range(1000)) if not solves(peer.public_key, RUN, n, cfg))


def test_a_solution_is_bound_to_its_key_and_run(alice, bob):
    hard = PuzzleConfig(bits=8, log2_n=4, r=1)
    nonce, tries = solve(alice.public_key, RUN, hard)
    assert solves(alice.public_key, RUN, nonce, hard) and tries >= 1
    misses = sum(not solves(key, run, nonce, hard) for key, run in (
        (bob.public_key, RUN), (alice.public_key, RUN + "-2")))
    assert misses >= 1  # another key or run solves it only by chance (1 in 256 each)
    zero = PuzzleConfig(bits=0, log2_n=4, r=1)
    assert solve(alice.public_key, RUN, zero)[1] == 1  # 0 bits: the first try solves it


def test_checker_refuses_old_versions_and_bad_puzzles_and_accepts_good_ones(alice, bob):
    checker = bob.checker
    assert checker.examine(alice.pointer()).reason == ""
    assert checker.examine(alice.member()).reason == ""
    assert checker.examine(alice.pointer(v=3)).reason == "old_version"
    assert checker.examine(alice.member(v=1)).reason == "old_version"
    assert checker.examine(alice.pointer(puzzle=_failing_nonce(alice))).reason == "bad_puzzle"
    assert checker.examine(alice.pointer(puzzle="xyz")).reason == "bad_schema"
    nopuzzle = alice.pointer()
    assert checker.examine(alice.sign(*_unsigned_without_puzzle(nopuzzle, checker))).reason == "bad_schema"


def _unsigned_without_puzzle(record, checker):
    """(key, subkey, value) of `record` with its value's puzzle field removed."""
    value = SER.loads(checker.strip_value(record))
    del value["puzzle"]
    return pointer_key(RUN, value["publisher"], value["window"]), SER.loads(record.subkey), value


def test_each_identity_is_verified_once_and_new_ones_at_a_bounded_rate(alice, bob):
    now = [0.0]
    verifier = PuzzleVerifier(PUZZLE.model_copy(update={"verify_rate": 2.0, "verify_burst": 3}), clock=lambda: now[0])
    crowd = [Peer() for _ in range(4)]
    assert [verifier.check(p.public_key, RUN, p.puzzle) for p in crowd] == ["", "", "", "puzzle_busy"]
    assert verifier.verified == 3
    for _ in range(10):  # known identities cost no scrypt and no token
        assert verifier.check(crowd[0].public_key, RUN, crowd[0].puzzle) == ""
    bad = _failing_nonce(alice)
    now[0] = 0.5  # one token back
    assert verifier.check(alice.public_key, RUN, bad) == "bad_puzzle"
    assert verifier.check(alice.public_key, RUN, bad) == "bad_puzzle"  # remembered: no token spent
    assert verifier.check(crowd[3].public_key, RUN, crowd[3].puzzle) == "puzzle_busy"
    now[0] = 1.0
    assert verifier.check(crowd[3].public_key, RUN, crowd[3].puzzle) == ""
    assert verifier.verified == 5


def test_a_puzzle_is_solved_once_and_kept_beside_the_key(tmp_path):
    path = tmp_path / "identity.key"
    first = NodeIdentity(path)
    nonce = load_or_solve(path, first.identity.public_key, RUN, PUZZLE)
    first.close()
    stored = json.loads(puzzle_path(path).read_text())
    assert stored["nonce"] == nonce and stored["run_id"] == RUN and stored["bits"] == PUZZLE.bits
    again = NodeIdentity(path)
    assert again.identity.peer_id == first.identity.peer_id
    assert load_or_solve(path, again.identity.public_key, RUN, PUZZLE) == nonce  # read back, not solved again
    other_run = load_or_solve(path, again.identity.public_key, RUN + "-b", PUZZLE)
    assert solves(again.identity.public_key, RUN + "-b", other_run, PUZZLE)
    assert json.loads(puzzle_path(path).read_text())["run_id"] == RUN + "-b"
    puzzle_path(path).write_text("not json")
    assert solves(again.identity.public_key, RUN, load_or_solve(path, again.identity.public_key, RUN, PUZZLE), PUZZLE)
    again.close()
