"""`bench scale`'s holders figures, from node rows as the workers write them."""

from __future__ import annotations

from ftis_swarm.lab.bench.scale import DEPART_ROUND, _holding

COPY = 1000


def _row(node: int, rnd: int, *, served: int, held: int, senders: list[str], arrivals: list[str],
         published: list[str], departed: bool = False) -> dict:
    return {"node": node, "round": rnd, "peer_id": f"p{node}", "publish_ok": True, "departed": departed,
            "senders": senders, "arrivals": {gid: 0.0 for gid in arrivals}, "published": [[g, 0.0] for g in published],
            "traffic": {"served_bytes": served, "held_served_bytes": held}}


def test_holders_figures_count_own_uploads_takers_held_bytes_and_the_departed_share():
    rows = [
        _row(0, DEPART_ROUND, served=2500, held=500, senders=["p1", "p2"], arrivals=["b1", "c1"], published=["a1"]),
        _row(1, DEPART_ROUND, served=1000, held=0, senders=["p0", "p2"], arrivals=["a1", "c2"], published=["b1"]),
        _row(2, DEPART_ROUND, served=500, held=0, senders=[], arrivals=[], published=["c1", "c2", "c3"], departed=True),
    ]
    figures = _holding(rows, copy_bytes=COPY)
    assert figures["own_copies"] == (2000 / COPY + 1000 / COPY) / 2  # the departed one is not a round's publisher
    assert figures["takers"] == (1 + 1 + 2) / 3  # p0 by node 1, p1 by node 0, p2 by nodes 0 and 1
    assert figures["held_kib_out"] == 500 / 3 / 1024
    assert figures["departed_share"] == 2 / 3 and figures["stayed_share"] == 1.0
