"""A node restarted with its identity inside the window it published in is read again at once.

Its membership record of a window counts its pointers there, and readers read its pointer key
again only when that count grows past what they read; the restarted client counts on from its
earlier life's claim (`SwarmClient._earlier_claims`), so its first new group is seen in a poll
or two, not after the window ends (120 s here).
"""

from __future__ import annotations

import pytest

from ftis_swarm.wire import content_id

pytestmark = [pytest.mark.net, pytest.mark.slow]


def test_a_restarted_identity_is_gathered_from_in_the_same_window(swarm, tmp_path):
    peers = swarm.bootstrap(ttl=300.0, max_clock_skew=5.0)
    cfg = swarm.config(run_id="restart", peers=peers, ttl=300.0, window=120.0, identity=tmp_path / "a.key")
    reader = swarm.node(swarm.config(run_id="restart", peers=peers, ttl=300.0, window=120.0)).joined()
    first = swarm.node(cfg).joined()
    before = {r["group_id"] for r in first.publish([f"life1-{i}" for i in range(4)])}
    got: set[str] = set()
    for _ in range(10):
        got |= {content_id(b) for b in reader.gather(1.0)["bodies"]}
        if before <= got:
            break
    assert before <= got
    first.kill()  # SIGKILL, node and p2pd

    again = swarm.node(cfg).joined()
    assert again.peer_id == first.peer_id
    after = {r["group_id"] for r in again.publish(["life2-0"])}
    seen: set[str] = set()
    for _ in range(6):  # 6 gathers of 1 s: a few polls, far inside the 120-s window
        seen |= {content_id(b) for b in reader.gather(1.0)["bodies"]}
        if after <= seen:
            break
    assert after <= seen, "the restarted identity's new group was not read in its window"
    assert "claimed 1 round pointers in window" in again.tail(None)  # its 4 groups were one round
