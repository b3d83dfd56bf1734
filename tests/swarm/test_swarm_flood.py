"""Floods and stalls against a 3-node testnet: every honest group still arrives, on time, and each attack is counted.

One hostile process (`ftis_swarm.lab.hostile.peer`: its own identity, 50 identities that only
sign, four libp2p daemons serving bad bodies) attacks while the honest nodes exchange
groups round after round: 5,000 pointers in one window from the 50 identities (their
bodies unreachable), 10,000 records under random keys, one whole-dictionary store of
20,000 unknown msgpack extension types, 16 pointers each to bodies that stall, send a
header then nothing, dribble a byte every 2 s, or never end, and replays of every honest
membership record. Then it floods the run's gossip topic from the same identities
(`hostile_gossip`): oversize messages, pointers without a record signature, replays of
the honest pointers and of its own, pointers expiring ten TTLs ahead, messages without a
gossipsub signature, and junk at many times the rate a sender may use. Pass: every honest
group published during the attacks reaches every other node bit for bit, no gather
overruns its deadline by a second, and each attack shows up under its own reason, at its
own count, in every honest node's counters; the flooder is disconnected.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from ftis_swarm.wire import content_id

pytestmark = [pytest.mark.net, pytest.mark.slow]

TTL, SKEW, DEADLINE, ROUNDS = 120.0, 5.0, 2.0, 5
FLOOD_POINTERS, IDENTITIES, RANDOM_KEYS, DICTIONARY_ITEMS, BAD_BODIES = 5000, 50, 10000, 20000, 16
GOSSIP_EACH, GOSSIP_ROUNDS = 4, 2


def _without_replays(counters: dict, gossip: dict) -> dict:
    """`rejected_by_peer` without the `tokenizer` rejections of the gossip flood's own replays."""
    return {peer: {r: n for r, n in reasons.items() if not (r == "tokenizer" and peer in gossip["own_replays"])}
            for peer, reasons in counters["rejected_by_peer"].items()}


def test_honest_groups_survive_floods_and_stalls(swarm, monkeypatch):
    # the bootstrap too takes the flood at once: at the default store rate, the honest nodes' replication
    # pushes of the 5,000 flood pointers they hold (one store each, thousands of records) empty their buckets
    # there, and their own membership records are then refused until it refills (a replay is then new to it)
    monkeypatch.setenv("FTIS_SWARM__RECORDS__STORE_RATE", "1e9")
    monkeypatch.setenv("FTIS_SWARM__RECORDS__STORE_BURST", str(1 << 30))
    peers = swarm.bootstrap(ttl=TTL, max_clock_skew=SKEW)
    # room for the whole pointer flood, at once, so that reading and fetching face all of it (storage quotas, by
    # identity and by origin: test_swarm_records.py, test_swarm_origins.py; the store rate: test_swarm_records.py)
    cfg = swarm.config(run_id="flood", peers=peers, ttl=TTL, max_clock_skew=SKEW, first_byte_timeout=1.0,
                       max_records_per_peer=8192, max_records_per_origin=16384, store_rate=1e9, store_burst=1 << 30,
                       window=30.0)  # a window long enough to hold the whole flood
    nodes = [swarm.node(cfg) for _ in range(3)]
    hostile = swarm.hostile(peers, cfg, identities=IDENTITIES)
    for node in nodes:
        node.joined()
    published: dict[int, dict[str, bytes]] = {i: {} for i in range(3)}
    received: dict[int, dict[str, bytes]] = {i: {} for i in range(3)}
    elapsed: list[float] = []

    def publish(i: int, rnd: int) -> None:
        results = nodes[i].publish([f"round{rnd}-node{i}-a", f"round{rnd}-node{i}-b"])
        assert all(r["ok"] for r in results), results
        published[i].update({r["group_id"]: r["body"] for r in results})

    def gather(i: int) -> None:
        answer = nodes[i].gather(DEADLINE)
        elapsed.append(answer["elapsed"])
        for body in answer["bodies"]:
            assert content_id(body) not in received[i]
            received[i][content_id(body)] = body

    def missing(i: int) -> set[str]:
        return {gid for j in range(3) if j != i for gid in published[j]} - received[i].keys()

    with ThreadPoolExecutor(max_workers=3) as pool:
        list(pool.map(lambda i: publish(i, 0), range(3)))  # warm-up: the nodes prove themselves to each other
        while any(missing(i) for i in range(3)):
            list(pool.map(gather, range(3)))
        for attack, n in (("pointers", FLOOD_POINTERS), ("random_keys", RANDOM_KEYS),
                          ("dictionary", DICTIONARY_ITEMS), ("bodies", BAD_BODIES), ("replays", 3)):
            assert hostile.request({"op": "flood", "attack": attack, "n": n}) == {"started": attack}
        for rnd in range(1, ROUNDS + 1):
            list(pool.map(lambda i: publish(i, rnd), range(3)))
            list(pool.map(gather, range(3)))
        floods = hostile.request({"op": "results"}, timeout=300.0)
        targets = [node.peer_id for node in nodes]
        assert hostile.request({"op": "flood", "attack": "gossip", "n": GOSSIP_EACH, "params": {
            "burst": cfg.gossip.burst, "targets": targets}}) == {"started": "gossip"}
        for rnd in range(ROUNDS + 1, ROUNDS + 1 + GOSSIP_ROUNDS):
            list(pool.map(lambda i: publish(i, rnd), range(3)))
            list(pool.map(gather, range(3)))
        gossip = hostile.request({"op": "results"}, timeout=300.0)["gossip"]
        stop_at = time.monotonic() + 60.0
        while any(missing(i) for i in range(3)) and time.monotonic() < stop_at:
            list(pool.map(gather, range(3)))

    for i in range(3):  # every honest group, bit for bit, nothing of its own
        assert not missing(i), (i, len(missing(i)))
        assert received[i] == {gid: body for j in range(3) if j != i for gid, body in published[j].items()}
    assert max(elapsed) < DEADLINE + 1.0, max(elapsed)

    # what the hostile peer got stored: all of the pointer flood, nothing else
    honest_ids = {node.peer_id for node in nodes}
    assert floods["pointers"]["sent"] == FLOOD_POINTERS + IDENTITIES
    assert {floods["pointers"]["accepted"][p] for p in honest_ids} == {FLOOD_POINTERS + IDENTITIES}
    assert {floods["random_keys"]["accepted"][p] for p in honest_ids} == {0}
    assert {floods["dictionary"]["accepted"][p] for p in honest_ids} == {0}
    assert floods["replays"]["sent"] > 0 and set(floods["replays"]["accepted"].values()) == {0}
    assert "error" not in gossip, gossip
    expected = {**{identity: {"fetch_failed": FLOOD_POINTERS // IDENTITIES} for identity in hostile.identities},
                **{hostile.body_peers[kind]: {"stalled": BAD_BODIES} for kind in ("stall", "silence", "dribble")},
                hostile.body_peers["endless"]: {"hash_mismatch": BAD_BODIES}}
    deadline = time.monotonic() + 60.0  # the last flood pointers may still be on their third try
    for node in nodes:
        while _without_replays(node.counters(), gossip) != expected and time.monotonic() < deadline:
            time.sleep(1.0)
        counters = node.counters()
        assert _without_replays(counters, gossip) == expected
        # each gossiped pointer of its own a replaying identity sent twice: taken once (another tokenizer), then
        # refused as a replay; p2pd may drop a few messages of a flood before the node sees them, never add one
        taken = [counters["rejected_by_peer"][identity].get("tokenizer", 0) for identity in gossip["own_replays"]]
        assert all(0 < k <= GOSSIP_EACH for k in taken) and sum(taken) >= 0.9 * len(taken) * GOSSIP_EACH, taken
        assert counters["faults"]["unbound_key"] == RANDOM_KEYS
        assert counters["faults"]["bad_encoding"] == 1
        log = node.tail(limit=None)
        assert "ExtType" not in log
        refusal_lines = [line for line in log.splitlines() if f"refused DHT requests from {hostile.peer_id}" in line]
        assert 1 <= len(refusal_lines) <= 30, refusal_lines  # one line per 10 s at most, never one per record
        sent, faults = gossip["sent"][node.peer_id], counters["faults"]
        assert sent["unsigned_envelope"] == IDENTITIES // 5 * GOSSIP_EACH  # sent, and dropped by p2pd: see `expected`
        assert sent["replayed"] >= len(nodes) and sent["oversize"] == IDENTITIES // 5 * GOSSIP_EACH
        for reason, category in (("oversize", "oversize"), ("bad_signature", "unsigned_record"),
                                 ("not_sender", "replayed"), ("far_expiry", "far_future")):
            assert 0.9 * sent[category] <= faults.get(f"gossip_{reason}", 0) <= sent[category], (reason, sent)
        assert faults.get("gossip_replayed", 0) <= sum(taken) and faults.get("gossip_replayed", 0) >= 0.8 * sum(taken)
        loud = [faults.get(f"gossip_{reason}", 0) for reason in ("bad_message", "rate", "banned")]
        # tokens, then drops, then a ban; p2pd may drop some of a burst before the node sees it (never adds)
        assert sent["high_rate"] * 0.8 <= sum(loud) <= sent["high_rate"] and min(loud) > 0, (loud, sent)
        assert loud[0] <= len(gossip["loud"]) * (cfg.gossip.burst + 30 * cfg.gossip.rate)  # the rate held
        assert counters["gossip_disconnects"] >= 1  # the flooder's own connection was cut
