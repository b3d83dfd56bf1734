"""`bench scale`'s holders figures, from node rows as the workers write them."""

from __future__ import annotations

from ftis_swarm.lab.bench.scale import DEPART_ROUND, _holding

COPY = 1000


def _row(node: int, rnd: int, *, served: int, held: int, senders: list[str], arrivals: list[str],
         published: list[str], departed: bool = False, sourceless: tuple[str, ...] = (),
         times: dict | None = None, peak: int = 0) -> dict:
    return {"node": node, "round": rnd, "peer_id": f"p{node}", "publish_ok": True, "departed": departed,
            "senders": senders, "arrivals": {gid: 0.0 for gid in arrivals}, "published": [[g, 0.0] for g in published],
            "traffic": {"served_bytes": served, "held_served_bytes": held},
            "sourceless": list(sourceless), "fetch_times": times or {"publisher": [], "holder": []}, "upload_peak": peak,
            **({"served": 2} if departed else {})}


def test_holders_figures_count_own_uploads_takers_held_bytes_and_the_departed_share():
    rows = [
        _row(0, DEPART_ROUND, served=2500, held=500, senders=["p1", "p2"], arrivals=["b1", "c1"], published=["a1"],
             sourceless=("c2", "c1", "x9"), times={"publisher": [0.01, 0.03, 0.02], "holder": [0.05]}, peak=2100),
        _row(1, DEPART_ROUND, served=1000, held=0, senders=["p0", "p2"], arrivals=["a1", "c2"], published=["b1"],
             sourceless=("c3",), times={"publisher": [0.04], "holder": [0.07, 0.09]}, peak=1000),
        _row(2, DEPART_ROUND, served=500, held=0, senders=[], arrivals=[], published=["c1", "c2", "c3"], departed=True),
    ]
    figures = _holding(rows, copy_bytes=COPY, cap=2000)
    assert figures["own_copies"] == (2000 / COPY + 1000 / COPY) / 2  # the departed one is not a round's publisher
    assert figures["own_copies_max"] == 2.0
    assert figures["takers"] == (1 + 1 + 2) / 3  # p0 by node 1, p1 by node 0, p2 by nodes 0 and 1
    assert figures["held_kib_out"] == 500 / 3 / 1024
    assert figures["departed_share"] == 2 / 3 and figures["stayed_share"] == 1.0
    # delivered (0, c1), (1, c2); given up on and not delivered: (0, c2), (1, c3) (x9 is not the departed's)
    assert figures["departed_wanted"] == 2 / 4 and figures["departed_served"] == 2.0
    assert figures["departed_wanted_held"] == 2 / 3  # c3 reached nobody: no holder could serve it
    assert figures["upload_peak"] == 2100 / 2000
    assert round(figures["fetch_publisher_ms"], 6) == 25.0 and round(figures["fetch_holder_ms"], 6) == 70.0
