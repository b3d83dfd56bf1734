"""A crowd stays within its share whatever it has earned, and a stall costs its place, never a ban (issue 40).

The selection (`fetch.selection`: what is fetched) and the intake (`peers.intake`: what reaches the
update) take earned peers origin by origin, cap each origin's tokens, and bound what identities of
recent credit take together; a publisher that stalls on a chosen body gives its budget to the next
candidate in the same gather and is not chosen first again until it serves. Tokens are counted
from what each pointer signs (`GroupPointer.tokens`) and, at intake, from the group itself.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import secrets
import time
from collections import Counter

import base58
import numpy as np
from wire_samples import groups_from

from ftis_swarm.config import LedgerConfig, SwarmConfig, WireConfig
from ftis_swarm.lab.hostile.floods import make_group
from ftis_swarm.peers.faults import SWARM_PREFIX, cost_of
from ftis_swarm.peers.intake import Budget, PeerIntake
from ftis_swarm.peers.ledger import PeerLedger
from ftis_swarm.swarm.counters import SwarmCounters
from ftis_swarm.swarm.dht.reading import FoundRecord
from ftis_swarm.swarm.fetch.gatherer import Gatherer
from ftis_swarm.swarm.fetch.pointers import Phase
from ftis_swarm.swarm.fetch.selection import Selection
from ftis_swarm.swarm.records import RECORD_VERSION, GroupPointer, make_round_pointer
from ftis_swarm.wire import encode_group

RUN, TFP, VOCAB, NONCE = "seq", "tok", 1000, "0" * 16
NAMES: dict[str, str] = {}


def pid(name: str) -> str:
    """A peer id for a short name (publishers are peer ids), remembered in `NAMES`."""
    peer = base58.b58encode(b"\x12\x20" + hashlib.sha256(name.encode()).digest()).decode()
    NAMES[peer] = name
    return peer


HONEST, STALLER = pid("honest"), pid("staller")


def _offers(name: str, *, groups: int, tokens: int = 50, round: int = 0, at: float = 1000.0) -> list[GroupPointer]:
    """`groups` pointers of `tokens` completion tokens each, as a publisher's round signs them."""
    return [GroupPointer(v=RECORD_VERSION, group_id=(gid := secrets.token_hex(16)), size=100, sha256=gid + "0" * 32,
                         publisher=pid(name), created_at=at + i, run_id="run", tokenizer_fp="tok", window=1,
                         round=round, round_groups=groups, tokens=tokens, puzzle=NONCE) for i in range(groups)]


def _offer(selection: Selection, *rounds: list[GroupPointer]) -> None:
    for pointers in rounds:
        for p in pointers:
            assert selection.offer(p) == []


class _Writer:
    def __init__(self, on_request):
        self._on_request = on_request

    def write(self, data: bytes) -> None:
        self._on_request([data[i:i + 32].decode() for i in range(1, len(data), 32)])

    async def drain(self) -> None:
        return None

    def close(self) -> None:
        return None


class Network:
    """The daemon's stream layer: each publisher serves its bodies, the staller never answers."""

    def __init__(self) -> None:
        self.bodies: dict[str, dict[str, bytes]] = {}

    async def call_binary_stream_handler(self, peer_id, name: str):
        peer, reader = peer_id.to_base58(), asyncio.StreamReader()

        def answer(ids: list[str]) -> None:
            if peer == STALLER:
                return
            out = b""
            for gid in ids:
                body = self.bodies.get(peer, {}).get(gid)
                out += b"\x01" if body is None else b"\x00" + len(body).to_bytes(8, "big") + body
            reader.feed_data(out)

        return None, reader, _Writer(answer)


class NoDHT:
    async def read(self, keys, *, timeout: float) -> dict:
        return {}


def _round(publisher: str, items: list[str], round: int) -> tuple[FoundRecord, list[bytes]]:
    groups = [make_group(sender=publisher, run_id=RUN, item=f"{round}-{item}", tokens=8, tokenizer_fp=TFP,
                         vocab_size=VOCAB, created_at=time.time()) for item in items]
    encoded = [(g, encode_group(g)) for g in groups]
    pointer = make_round_pointer(encoded, publisher=publisher, run_id=RUN, tokenizer_fp=TFP, window=1, round=round,
                                 puzzle=NONCE)
    return FoundRecord(owner=publisher, content=pointer, expiration=time.time() + 60), [b for _, b in encoded]

CROWD = [f"crowd-{i:02d}" for i in range(20)]
FAIR = ["honest-a", "honest-b"]
# 960 peer tokens an update: a quarter for strangers, a quarter at most for identities of recent credit,
# half at most for one origin's identities
BUDGET = Budget(max_groups=64, max_groups_per_peer=32, max_tokens=960, max_tokens_per_peer=480, context=4096,
                strangers_share=0.25, max_tokens_per_origin=480, max_groups_per_origin=32, recent_share=0.25)
SCORES = {**{c: 20.0 for c in CROWD}, **{h: 0.25 for h in FAIR}}  # credit bought fast beats honest credit


def _origin(many: bool):
    """The crowd on 20 origins (`many`) or on one; each honest peer on an origin of its own."""
    def origin_of(peer: str) -> str:
        name = NAMES.get(peer, peer)
        if name in FAIR:
            return f"10.{FAIR.index(name)}.0.0/24"
        return f"127.0.{CROWD.index(name) if many else 0}.0/24"
    return origin_of


def _tokens(pointers, who) -> int:
    return sum(p.tokens for p in pointers if NAMES[p.publisher] in who)


def _select(*, many: bool, recent: bool, origins: bool = True, budget: Budget = BUDGET) -> list:
    """What a selection fetches of 20 crowd identities' 8-token groups and 2 honest peers' 24-token groups."""
    sel = Selection(budget, seed="me", score=lambda peer: SCORES[NAMES[peer]],
                    origin_of=_origin(many) if origins else None,
                    recent=(lambda peer: NAMES[peer] in CROWD) if recent else None)
    _offer(sel, *(_offers(c, groups=10, tokens=8) for c in CROWD), *(_offers(h, groups=20, tokens=24) for h in FAIR))
    chosen = sel.choose().chosen
    sel.open(round=1)
    return chosen + sel.choose().chosen


def _take(*, many: bool, recent: bool, origins: bool = True, budget: Budget = BUDGET):
    """What an intake takes of the same offers as groups (standing: every one of them)."""
    rng = np.random.default_rng(0)
    groups = [g for c in CROWD for g in groups_from(rng, c, 10, length=4)]  # 2 completions of 4: 8 tokens
    groups += [g for h in FAIR for g in groups_from(rng, h, 20, length=12)]  # 24 tokens
    origin = _origin(many) if origins else None
    taken = PeerIntake(budget, seed="me").take(groups, {}, lambda peer: True, standing=lambda peer: True,
                                                rank=SCORES.__getitem__, origin=origin, draw=1,
                                                recent=(CROWD.__contains__) if recent else None)
    return taken


def test_an_earned_crowd_on_20_origins_takes_at_most_its_share_of_tokens_in_selection_and_intake():
    chosen = _select(many=True, recent=True)
    crowd, fair = _tokens(chosen, CROWD), _tokens(chosen, FAIR)
    share = BUDGET.recent_share + BUDGET.strangers_share  # documented: its recent part, then the strangers' draw
    assert crowd <= share * BUDGET.max_tokens and fair >= 480, (crowd, fair)
    assert crowd + fair <= BUDGET.max_tokens
    unbounded = _select(many=True, recent=False)  # without the bound the crowd's rank and turns starve the honest
    assert _tokens(unbounded, CROWD) > crowd and _tokens(unbounded, FAIR) < 480 <= fair

    taken = _take(many=True, recent=True)
    kept = Counter()
    for g in taken.kept:
        kept["crowd" if g.sender in CROWD else "fair"] += g.num_completion_tokens
    assert kept["crowd"] <= share * BUDGET.max_tokens and kept["fair"] >= 480, kept
    untaken = _take(many=True, recent=False).kept
    assert sum(g.num_completion_tokens for g in untaken if g.sender in FAIR) < 480 <= kept["fair"]
    # the status's view: per origin, the tokens and identities the update took
    assert sum(o["tokens"] for o in taken.by_origin.values()) == kept["crowd"] + kept["fair"]
    assert taken.by_origin["origin:10.0.0.0/24"]["identities"] == 1
    assert sum(o["identities"] for k, o in taken.by_origin.items() if k.startswith("origin:127.")) <= 20


def test_an_earned_crowd_on_one_origin_is_held_to_the_origin_cap():
    tight = dataclasses.replace(BUDGET, max_tokens_per_origin=240)  # an origin may take a quarter
    chosen = _select(many=False, recent=False, budget=tight)
    alone = _select(many=False, recent=False, origins=False, budget=tight)  # each identity its own origin
    assert _tokens(chosen, CROWD) <= 240 < _tokens(alone, CROWD), (_tokens(chosen, CROWD), _tokens(alone, CROWD))
    taken = _take(many=False, recent=False, budget=tight)
    crowd = sum(g.num_completion_tokens for g in taken.kept if g.sender in CROWD)
    apart = sum(g.num_completion_tokens for g in _take(many=False, recent=False, origins=False, budget=tight).kept
                if g.sender in CROWD)
    assert crowd <= 240 < apart, (crowd, apart)
    assert taken.counts["peer_deferred"] > 0 and taken.by_origin["origin:127.0.0.0/24"]["identities"] >= 2
    assert taken.by_origin["origin:127.0.0.0/24"]["tokens"] == crowd


def test_budget_of_a_config_carries_the_origin_cap_and_the_recent_share():
    from ftis_swarm.config import NodeConfig

    cfg = NodeConfig(ledger=LedgerConfig(max_origin_share=0.5, recent_earned_share=0.2))
    b = Budget.of(cfg, context=4096)
    assert b.max_tokens_per_origin == b.max_tokens // 2 and b.recent_share == 0.2
    assert b.recent_part().tokens == int(b.max_tokens * 0.2)
    assert Budget.of(cfg.model_copy(update={"ledger": LedgerConfig(max_origin_share=1.0)}),
                     context=4096).max_tokens_per_origin is None


def test_credit_is_recent_for_its_rounds_and_a_fault_starts_it_afresh():
    ledger = PeerLedger(LedgerConfig(recent_credit_rounds=2))
    assert not ledger.recent("p")
    ledger.credit("p", 1.0)
    assert ledger.recent("p")
    ledger.take_round()
    assert ledger.recent("p")
    ledger.take_round()
    assert not ledger.recent("p") and ledger.score("p") > 0  # still earned, no longer recent
    ledger.charge("p", "forgery")  # a proven fault takes the credit
    ledger.credit("p", 30.0)
    assert ledger.score("p") > 0 and ledger.recent("p")  # earned again: recent again
    restored = PeerLedger(LedgerConfig(recent_credit_rounds=2))
    restored.load_state(ledger.state())
    assert restored.recent("p")


def test_a_stalled_publisher_is_not_chosen_first_until_it_serves():
    sel = Selection(dataclasses.replace(BUDGET, strangers_share=0.0, recent_share=1.0, max_tokens=200,
                                        max_tokens_per_peer=200, max_tokens_per_origin=None),
                    seed="me", score={pid("stall"): 9.0, pid("fast"): 1.0}.get)
    sel.table.note_stall(pid("stall"))
    _offer(sel, _offers("stall", groups=2), _offers("fast", groups=2))
    assert Counter(NAMES[p.publisher] for p in sel.choose().chosen) == {"fast": 2}  # its score buys no rank
    sel.table.note_served(pid("stall"))
    sel.next_gather()
    for p in _offers("stall", groups=2, round=1, at=2000.0):
        sel.offer(p)  # replaces its round on offer
    assert Counter(NAMES[p.publisher] for p in sel.choose().chosen) == {"stall": 2}  # served: its rank is back


class Scores:
    """The ledger as the swarm reads it: all allowed, a score each."""

    def __init__(self, scores: dict[str, float]):
        self.scores = scores

    def allows(self, peer: str) -> bool:
        return True

    def score(self, peer: str) -> float:
        return self.scores.get(peer, 0.0)


def test_a_stalled_chosen_body_gives_its_budget_to_the_next_candidate_in_the_same_gather_and_costs_no_fault():
    async def run():
        cfg = SwarmConfig(run_id="seq", poll_interval=0.05, ttl=60.0, max_clock_skew=5.0, fetch_timeout=1.0,
                          first_byte_timeout=0.3, max_fetch_attempts=5, wire=WireConfig(max_bytes=256 * 1024))
        counters, net = SwarmCounters(), Network()
        honest = HONEST
        gatherer = Gatherer(reader=NoDHT(), p2p=net, cfg=cfg, peer_id=pid("me"), tokenizer_fp=TFP, vocab_size=VOCAB,
                            counters=counters, policy=Scores({STALLER: 9.0, honest: 1.0}))
        await gatherer.use_budget(Budget(max_groups=2, max_groups_per_peer=2, max_tokens=64, max_tokens_per_peer=64,
                                         context=4096, strangers_share=0.0))
        rounds = {}

        def publish(who: str, r: int) -> list[str]:
            record, bodies = _round(who, ["a", "b"], r)
            ids = [v.group_id for v in record.content.views()]
            if who != STALLER:
                net.bodies.setdefault(who, {}).update(zip(ids, bodies))
            rounds[who] = ids
            gatherer.on_gossip(record)
            return ids

        def phases(who: str, ids: list[str]) -> set[Phase]:
            return {gatherer.table.get((who, gid)).phase for gid in ids}

        stalled = publish(STALLER, 1)  # the higher score: chosen at once, the whole budget
        staller_was_first = phases(STALLER, stalled) <= {Phase.CHOSEN, Phase.FETCHING}
        honest_ids = publish(honest, 1)  # no budget left for now
        await gatherer.open_gather(2.0, round=1)
        began = time.monotonic()
        waited, got = began + 1.2, []  # under the 5 x 0.3 s a staller held the budget for before
        while not set(honest_ids) <= set(got) and time.monotonic() < waited:
            await asyncio.sleep(0.05)
            got += [g.group_id for g, _ in gatherer.drain()]
        in_one_gather = set(honest_ids) <= set(got)
        await gatherer.close_gather()
        # the next gather: both offer again, the staller first; the honest peer is chosen first now
        stalled_again = publish(STALLER, 2)
        again = publish(honest, 2)
        next_phases = phases(honest, again), phases(STALLER, stalled_again)
        gatherer._scheduler.cancel()
        return counters, in_one_gather, staller_was_first, next_phases, gatherer.table.stalled(STALLER)

    counters, in_one_gather, staller_was_first, (honest_next, staller_next), stalls = asyncio.run(run())
    assert staller_was_first  # its score put it first
    assert in_one_gather  # its stall gave the budget to the honest peer's groups within the same gather
    assert honest_next <= {Phase.CHOSEN, Phase.FETCHING, Phase.ACCEPTED}, honest_next  # chosen first now
    assert staller_next == {Phase.OFFERED}  # its score buys no precedence until it serves
    assert stalls >= 1
    snap = counters.snapshot()
    assert set(snap["rejected_by_peer"].get(STALLER, {})) <= {"stalled"}
    ledger = PeerLedger()
    ledger.charge_swarm(counters.drain_peer_faults())
    assert ledger.snapshot()[STALLER]["cost"] == 0.0 and ledger.allows(STALLER)  # a stall is never a fault
    assert cost_of(SWARM_PREFIX + "stalled") == 0.0 and cost_of(SWARM_PREFIX + "body_stalled") == 0.0
