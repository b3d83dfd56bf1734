"""The strangers' draw (peers/draw.py): origins in turn, identities in turn within an origin, seeded per draw."""

from __future__ import annotations

from collections import Counter

from ftis_swarm.peers.draw import interleave, strangers_in_turns

CROWD = {f"crowd-{i:02d}": "10.0.0.0/24" for i in range(54)}


def offers(per_identity: int = 2) -> list[tuple[str, int]]:
    """(sender, its k-th group): the crowd's identities, then a newcomer's."""
    return [(s, k) for s in [*CROWD, "newcomer"] for k in range(per_identity)]


def order(draw: int, seed: str = "node", origin_of=None, given=None) -> list[tuple[str, int]]:
    origin_of = origin_of if origin_of is not None else {**CROWD, "newcomer": "10.0.1.0/24"}.get
    return strangers_in_turns(given if given is not None else offers(), sender=lambda o: o[0],
                              origin_of=origin_of, seed=seed, draw=draw)


def test_each_origin_takes_one_turn_a_pass_whatever_its_number_of_identities():
    for draw in range(20):
        got = order(draw)
        assert sorted(got) == sorted(offers())  # a reordering: nothing lost, nothing repeated
        firsts = got[:2]
        assert Counter(s == "newcomer" for s, _ in firsts) == {True: 1, False: 1}  # one turn each origin
        assert [k for s, k in got if s == "newcomer"] == [0, 1]  # its groups in the order offered
        assert got.index(("newcomer", 1)) <= 3  # its second group in the second pass
        crowd = [s for s, _ in got if s != "newcomer"]
        assert len(set(crowd[:54])) == 54  # within the origin: one group of each identity in turn


def test_the_draw_is_seeded_fresh_each_draw_and_different_for_another_seed():
    assert order(3) == order(3)
    firsts = {order(d)[0][0] == "newcomer" for d in range(20)}
    assert firsts == {True, False}  # the origins' order is drawn afresh: each origin sometimes first
    assert len({tuple(order(d)[:6]) for d in range(20)}) == 20  # and the identities' within the crowd
    assert order(3) != order(3, seed="another node")


def test_the_order_of_two_identities_does_not_depend_on_what_else_is_on_offer():
    everyone = order(7)
    some = [o for o in offers() if o[0] in ("crowd-03", "crowd-40", "newcomer")]
    part = order(7, given=some)
    rank = {o: i for i, o in enumerate(everyone)}
    crowd_part = [o for o in part if o[0] != "newcomer"]
    assert crowd_part == sorted(crowd_part, key=rank.__getitem__)  # within an origin, the same relative order


def test_without_origins_every_identity_is_an_origin_of_its_own():
    given = [("a", 0), ("a", 1), ("a", 2), ("b", 0), ("c", 0)]
    got = order(1, origin_of=lambda peer: None, given=given)
    assert sorted(s for s, _ in got[:3]) == ["a", "b", "c"]
    assert got[3:] == [("a", 1), ("a", 2)]
    assert strangers_in_turns(given, sender=lambda o: o[0], origin_of=None, seed="node", draw=1) == got


def test_interleave_takes_the_first_of_each_then_the_second():
    assert interleave([[1, 2, 3], [4], [5, 6]]) == [1, 4, 5, 2, 6, 3]
    assert interleave([]) == []
