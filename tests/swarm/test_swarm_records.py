"""The record checks, the strict DHT decoding and the guarded storage, on real records (no network)."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections import Counter
from types import SimpleNamespace

import msgpack
import numpy as np
import pytest
from hivemind.dht.protocol import DHTProtocol
from hivemind.dht.routing import DHTID
from hivemind.dht.storage import DictionaryDHTValue
from hivemind.dht.validation import DHTRecord
from hivemind.p2p import P2PContext, PeerID
from hivemind.proto import dht_pb2
from hivemind.utils.serializer import MSGPackSerializer
from record_peers import RUN, SER, TTL, Peer, Scores, W

from ftis_swarm.config import WireConfig
from ftis_swarm.lab.hostile.floods import make_group
from ftis_swarm.peers import faults
from ftis_swarm.swarm.counters import SwarmCounters
from ftis_swarm.swarm.dht.codec import DICTIONARY_EXT, BoundedSerializer, NotPointerForm, value_items
from ftis_swarm.swarm.dht.guard import DHTServicer
from ftis_swarm.swarm.dht.storage import RECORD_OVERHEAD, GuardedStorage
from ftis_swarm.swarm.keys import member_key, pointer_key
from ftis_swarm.swarm.records import (
    MAX_GROUPS_PER_ROUND,
    MAX_ROUND,
    RoundPointer,
    check_body,
    make_round_pointer,
    screen_pointer,
)
from ftis_swarm.wire import encode_group


def test_checker_accepts_pointers_and_membership_and_names_each_refusal(alice, bob):
    checker = bob.checker
    for record in (alice.pointer(), alice.member()):
        verdict = checker.examine(record)
        assert verdict.reason == "" and verdict.owner.peer_id == alice.peer_id
        assert checker.examine(record) == verdict  # remembered (by its digest; parsed again)
    mine = alice.pointer()
    refusals = {
        "unbound_key": alice.pointer(key=pointer_key(RUN, bob.peer_id, W)),  # under another peer's key
        "bad_schema": alice.pointer(size=100.0),
        "owner_mismatch": alice.pointer(publisher=bob.peer_id, key=pointer_key(RUN, alice.peer_id, W)),
        "far_expiry": alice.sign(pointer_key(RUN, alice.peer_id, W), SER.loads(mine.subkey),
                                 SER.loads(checker.strip_value(mine)), time.time() + 10 * TTL),
        "oversize_record": dataclasses.replace(mine, value=mine.value + b"x" * 5000),
        "not_pointer_form": dataclasses.replace(mine, subkey=SER.dumps(b"plain")),
        "bad_signature": dataclasses.replace(mine, expiration_time=mine.expiration_time + 1),  # a replay, moved
    }
    unsigned_overwrite = bob.sign(pointer_key(RUN, alice.peer_id, W), SER.loads(mine.subkey),
                                  SER.loads(checker.strip_value(mine)))  # bob signs alice's subkey
    assert checker.examine(unsigned_overwrite).reason == "bad_signature"
    assert checker.examine(alice.member(key=member_key(RUN, W + 1, 0))).reason == "unbound_key"
    assert checker.examine(alice.pointer(round=MAX_ROUND)).reason == "bad_schema"  # a round past MAX_ROUND
    assert checker.examine(alice.pointer(round=2**63)).reason == "not_pointer_form"  # its subkey is too long
    assert checker.examine(alice.pointer(round=MAX_ROUND - 1)).reason == ""
    assert {name: checker.examine(record).reason for name, record in refusals.items()} == {
        name: name for name in refusals}


def test_a_round_pointer_is_one_record_for_a_round_and_its_views_bind_each_body(alice, bob):
    checker = bob.checker
    record = alice.pointer(round=12, n_groups=16)
    verdict = checker.examine(record)
    assert verdict.reason == "" and isinstance(verdict.content, RoundPointer)
    assert len(record.subkey) + len(record.value) < 2600  # 16 groups signed into one record of ~2.3 KB
    views = verdict.content.views()
    assert [(v.round, v.round_groups) for v in views] == [(12, 16)] * 16 and len({v.group_id for v in views}) == 16
    twice = SER.loads(checker.strip_value(record))
    twice["groups"] = [twice["groups"][0], twice["groups"][0]]
    refusals = {
        "owner_mismatch": alice.sign(pointer_key(RUN, alice.peer_id, W), SER.loads(record.subkey),
                                     {**SER.loads(checker.strip_value(record)), "round": 13}),  # subkey says r12
        "bad_schema": alice.sign(pointer_key(RUN, alice.peer_id, W), SER.loads(record.subkey), twice),
    }
    assert {name: checker.examine(r).reason for name, r in refusals.items()} == {name: name for name in refusals}
    assert checker.examine(alice.pointer(n_groups=MAX_GROUPS_PER_ROUND + 1)).reason == "bad_schema"

    group = make_group(sender=alice.peer_id, run_id=RUN, item="x", tokens=24, tokenizer_fp="tok", vocab_size=1000)
    body = encode_group(group)
    [pointer] = make_round_pointer([(group, body)], publisher=alice.peer_id, run_id=RUN, tokenizer_fp="tok",
                                   window=W, round=0, puzzle=alice.puzzle).views()
    assert pointer.tokens == group.num_completion_tokens > 0 and pointer.group_id == group.group_id
    assert check_body(body, pointer, vocab_size=1000, limits=WireConfig())[1] == ""
    lied = pointer.model_copy(update={"tokens": pointer.tokens - 1})  # signed fewer tokens than the body holds
    assert check_body(body, lied, vocab_size=1000, limits=WireConfig())[1] == "pointer_mismatch"


def test_another_tokenizers_group_passes_only_with_alignment_data(alice):
    def pointed(group):
        body = encode_group(group)
        [pointer] = make_round_pointer([(group, body)], publisher=alice.peer_id, run_id=RUN,
                                       tokenizer_fp=group.tokenizer_fp, window=W, round=0, puzzle=alice.puzzle).views()
        return body, pointer

    plain = make_group(sender=alice.peer_id, run_id=RUN, item="x", tokens=6, tokenizer_fp="qwen", vocab_size=5000)
    body, pointer = pointed(plain)
    # the screen: refused unfetched unless this node fetches other tokenizers
    screen = dict(now=pointer.created_at, run_id=RUN, tokenizer_fp="smol", ttl=TTL, max_clock_skew=5.0,
                  max_bytes=1 << 20)
    # the screen: its pointer does not say `aligned`, so it is refused unfetched, whether or not this node
    # fetches other tokenizers
    assert not pointer.aligned
    assert screen_pointer(pointer, **screen) == "tokenizer"
    assert screen_pointer(pointer, **screen, other_tokenizers=True) == "tokenizer"
    assert faults.SWARM[faults.POINTER_TOKENIZER].cost == 0
    # a pointer that signs `aligned` over such a body is fetched and refused as a signed lie
    lying = pointer.model_copy(update={"aligned": True})
    assert screen_pointer(lying, **screen, other_tokenizers=True) == ""
    assert check_body(body, lying, vocab_size=1000, limits=WireConfig(), tokenizer_fp="smol")[1] == "pointer_mismatch"
    assert faults.SWARM[faults.POINTER_MISMATCH].cost > 0
    # a body without alignment data behind a pointer the screen was not asked about: no one's fault
    assert check_body(body, pointer, vocab_size=1000, limits=WireConfig(), tokenizer_fp="smol")[1] == "tokenizer"
    # with it, ids past this node's vocabulary pass: the learner re-encodes the text
    texts = [b"ab" * len(c) for c in plain.completion_ids]
    aligned = dataclasses.replace(plain, tokenizer_family="qwen2", texts=tuple(texts),
                                  token_bytes=tuple(np.full(len(c), 2, np.uint8) for c in plain.completion_ids))
    aligned._id.clear()
    body, pointer = pointed(aligned)
    assert pointer.aligned  # the publisher signs that its body carries alignment data
    assert screen_pointer(pointer, **screen) == "tokenizer"  # a node that fetches no other tokenizer
    assert screen_pointer(pointer, **screen, other_tokenizers=True) == ""
    # a round whose bodies do not all carry it (an aligner leaves out a completion cut inside a character)
    # says `aligned` false: its aligned bodies are no lie
    [mixed, bare] = make_round_pointer([(aligned, body), (plain, encode_group(plain))], publisher=alice.peer_id,
                                       run_id=RUN, tokenizer_fp="qwen", window=W, round=1, puzzle=alice.puzzle).views()
    assert not mixed.aligned and not bare.aligned
    assert check_body(body, mixed, vocab_size=1000, limits=WireConfig(), tokenizer_fp="smol")[1] == ""
    assert screen_pointer(mixed, **screen, other_tokenizers=True) == "tokenizer"  # not fetched by another tokenizer
    assert max(int(c.max()) for c in aligned.completion_ids) >= 1000  # out of this node's vocabulary
    group, reason, _ = check_body(body, pointer, vocab_size=1000, limits=WireConfig(), tokenizer_fp="smol")
    assert reason == "" and group.aligned and group.texts == aligned.texts
    # and the same body to a node of the publisher's tokenizer is bounded by the vocabulary as ever
    assert check_body(body, pointer, vocab_size=1000, limits=WireConfig(), tokenizer_fp="qwen")[1] == "malformed"


def test_a_record_read_again_costs_no_rsa_and_the_checker_keeps_only_its_digest(alice, bob):
    checker, pointer = bob.checker, alice.pointer(n_groups=3)
    first = checker.examine(pointer)
    assert first.reason == "" and isinstance(first.content, RoundPointer)
    rsa_checks = []
    real = checker._rsa.validate
    checker._rsa.validate = lambda record: rsa_checks.append(record) or real(record)
    again = checker.examine(pointer)
    assert again.reason == "" and again.content == first.content and rsa_checks == []  # remembered: parsed, not verified
    assert list(checker._accepted.values()) == [None] * len(checker._accepted)  # digests only, no parsed records
    forged = DHTRecord(pointer.key, pointer.subkey, pointer.value[:-3] + b"xx]", pointer.expiration_time)
    assert checker.examine(forged).reason == "bad_signature" and len(rsa_checks) == 1  # another digest: checked


def test_strict_decoding_refuses_extension_types_at_once(alice):
    record = alice.pointer()
    dictionary = DictionaryDHTValue()
    dictionary.store(SER.loads(record.subkey), record.value, record.expiration_time)
    wire = MSGPackSerializer.dumps(dictionary)
    assert value_items(wire) == [(record.subkey, record.value, record.expiration_time)]
    decoded = BoundedSerializer.loads(wire)
    assert dict(decoded.items()) == dict(dictionary.items())

    items = [[msgpack.ExtType(1 + i % 31, b"x"), b"v", 1.0] for i in range(20000)]
    hostile = msgpack.packb(msgpack.ExtType(DICTIONARY_EXT, msgpack.packb([None, 1.0, items])))
    with pytest.raises(NotPointerForm):
        value_items(hostile)
    with pytest.raises(NotPointerForm):
        BoundedSerializer.loads(hostile)
    with pytest.raises(NotPointerForm):
        BoundedSerializer.loads(msgpack.packb(msgpack.ExtType(0x40, b"\x90")))  # hivemind's tuples: not ours


def _storage(policy: Scores, **limits: int) -> GuardedStorage:
    return GuardedStorage(self_id="me", policy=policy, is_dht_peer=lambda peer: False,
                          **{"max_records": 1000, "max_records_per_peer": 1000, **limits})


def _admit(storage: GuardedStorage, record: DHTRecord, owner: str, requester: str) -> str:
    return storage.admit(key_id_from(record), SER.loads(record.subkey), record.value, record.expiration_time,
                         owner=owner, requester=requester)


def key_id_from(record: DHTRecord) -> DHTID:
    return DHTID.from_bytes(record.key)


def test_storage_quotas_per_owner_requester_and_total(alice, bob):
    policy = Scores()
    storage = _storage(policy, max_records_per_peer=3, max_records=5)
    assert [_admit(storage, alice.pointer(), alice.peer_id, "relay") for _ in range(4)] == ["", "", "", "owner_quota"]
    assert _admit(storage, bob.pointer(), bob.peer_id, "relay") == "requester_quota"  # relay sent 3 already
    assert [_admit(storage, bob.pointer(), bob.peer_id, bob.peer_id) for _ in range(2)] == ["", ""]
    assert _admit(storage, Peer().pointer(), "carol", "another relay") == "storage_full"  # strangers evict nobody
    assert _admit(storage, bob.pointer(), bob.peer_id, bob.peer_id) == ""  # bob's own store evicts a relayed one
    assert storage.held == 5
    assert Counter(entry.owner for entry in storage._entries.values()) == {alice.peer_id: 2, bob.peer_id: 3}
    policy.denied.add(bob.peer_id)
    assert _admit(storage, bob.pointer(), bob.peer_id, bob.peer_id) == "denied"


def test_storage_evicts_strangers_first_and_never_a_scored_peer(alice, bob):
    policy = Scores()
    stranger = Peer()
    storage = _storage(policy, max_records=4)
    assert _admit(storage, alice.pointer(), alice.peer_id, alice.peer_id) == ""  # stored by its owner: rank 1
    policy.scores[bob.peer_id] = 1.0
    assert _admit(storage, bob.pointer(), bob.peer_id, "relay") == ""  # scored: rank 2
    assert [_admit(storage, stranger.pointer(), stranger.peer_id, "relay") for _ in range(3)] == [
        "", "", "storage_full"]
    assert storage.held == 4
    # a peer that stores its own record evicts a stranger's (the newest), never alice's or bob's
    assert _admit(storage, alice.pointer(), alice.peer_id, alice.peer_id) == ""
    assert storage.held == 4
    # strangers cannot evict each other, nor alice, nor bob
    assert _admit(storage, stranger.pointer(), stranger.peer_id, "relay") == "storage_full"
    # a record stored as a stranger's is kept once its owner is scored
    policy.scores[stranger.peer_id] = 0.5
    assert _admit(storage, Peer().pointer(), "someone", "someone") == "storage_full"
    owners = Counter(entry.owner for entry in storage._entries.values())
    assert owners == {alice.peer_id: 2, bob.peer_id: 1, stranger.peer_id: 1}


def test_storage_bounds_bytes_per_key_and_replaces_only_newer(alice):
    first = alice.pointer()
    storage = _storage(Scores(), max_key_bytes=3 * (len(first.subkey) + len(first.value)) + 10)
    assert [_admit(storage, alice.pointer(), alice.peer_id, alice.peer_id) for _ in range(4)] == [
        "", "", "", "key_full"]
    member = alice.member()
    assert _admit(storage, member, alice.peer_id, alice.peer_id) == ""  # another key
    assert _admit(storage, member, alice.peer_id, "relay") == "not_newer"  # a replay
    newer = alice.member(groups=4)  # signed later: it expires later
    assert newer.expiration_time > member.expiration_time
    assert _admit(storage, newer, alice.peer_id, alice.peer_id) == ""
    assert _admit(storage, member, alice.peer_id, "relay") == "not_newer"  # the old version cannot come back
    held = storage.get(key_id_from(member)).value
    assert held.get(SER.loads(member.subkey)).value == newer.value
    assert storage.held == 4


def test_storage_bounds_its_bytes_charging_each_record_its_memory(alice, bob):
    pointer = alice.pointer(round=9999)  # rounds of four digits: subkeys of one length, records of one charge
    charge = len(SER.loads(pointer.subkey)) + len(pointer.value) + RECORD_OVERHEAD
    storage = _storage(Scores(), max_bytes=3 * charge + charge // 2)
    assert [_admit(storage, alice.pointer(round=1000 + i), alice.peer_id, "relay") for i in range(4)] == [
        "", "", "", "storage_full"]  # 3.5 records' worth of bytes, 1000 records' worth of slots
    assert storage.held == 3 and storage.held_bytes == 3 * charge
    big = alice.pointer(round=2000, tokenizer_fp="t" * 64)  # a larger record is charged more
    assert _admit(storage, big, alice.peer_id, alice.peer_id) == ""  # stored by its owner: evicts a relayed one
    assert storage.held == 3 and storage.held_bytes == 2 * charge + charge + len(big.value) - len(pointer.value)
    assert _admit(storage, bob.pointer(round=1000), bob.peer_id, "relay") == "storage_full"  # strangers evict nobody
    storage._purge(float("inf"))  # everything expired: the bytes go with the records
    assert storage.held == 0 and storage.held_bytes == 0


def test_servicer_refuses_what_is_not_a_pointer_with_one_count_each(alice, bob):
    policy, counters = Scores(), SwarmCounters()
    storage = _storage(policy)
    protocol = SimpleNamespace(node_info=dht_pb2.NodeInfo())  # all the servicer reads when no peer is named
    servicer = DHTServicer(protocol=protocol, storage=storage, checker=bob.checker, policy=policy, counters=counters)
    good = alice.pointer()
    forged = alice.pointer(key=pointer_key(RUN, bob.peer_id, W))
    items = [[msgpack.ExtType(5, b"x"), b"v", 1.0] for _ in range(20000)]
    hostile = msgpack.packb(msgpack.ExtType(DICTIONARY_EXT, msgpack.packb([None, 1.0, items])))
    request = dht_pb2.StoreRequest(
        keys=[good.key, forged.key, good.key, good.key, good.key],
        subkeys=[good.subkey, forged.subkey, DHTProtocol.IS_DICTIONARY, DHTProtocol.IS_REGULAR_VALUE, good.subkey],
        values=[good.value, forged.value, hostile, good.value, good.value],
        expiration_time=[good.expiration_time] * 5, in_cache=[False, False, False, False, True])
    context = P2PContext(handle_name="DHTProtocol.rpc_store", local_id=PeerID(b"me"),
                         remote_id=PeerID.from_base58(alice.peer_id))
    response = asyncio.run(servicer.rpc_store(request, context))
    assert list(response.store_ok) == [True, False, False, False, False]
    assert counters.snapshot()["faults"] == {"unbound_key": 1, "bad_encoding": 1, "regular_value": 1,
                                             "cache_store": 1}
    assert counters.drain_peer_faults() == {alice.peer_id: Counter(unbound_key=1, bad_encoding=1,
                                                                   regular_value=1, cache_store=1)}
    assert storage.held == 1


def test_servicer_paces_each_requester_before_checking_and_never_charges_the_rate(alice, bob):
    from ftis_swarm.swarm.dht.guard import StoreRate

    now = [0.0]
    rate = StoreRate(rate=2.0, burst=3, clock=lambda: now[0])
    policy, counters = Scores(), SwarmCounters()
    storage = _storage(policy)
    servicer = DHTServicer(protocol=SimpleNamespace(node_info=dht_pb2.NodeInfo()), storage=storage,
                           checker=bob.checker, policy=policy, counters=counters, store_rate=rate)
    checked = []
    examine = bob.checker.examine
    servicer._checker = SimpleNamespace(examine=lambda record: checked.append(record) or examine(record))

    def store(records) -> list[bool]:
        request = dht_pb2.StoreRequest(keys=[r.key for r in records], subkeys=[r.subkey for r in records],
                                       values=[r.value for r in records],
                                       expiration_time=[r.expiration_time for r in records],
                                       in_cache=[False] * len(records))
        context = P2PContext(handle_name="rpc_store", local_id=PeerID(b"me"),
                             remote_id=PeerID.from_base58(alice.peer_id))
        return list(asyncio.run(servicer.rpc_store(request, context)).store_ok)

    assert store([alice.pointer(round=r) for r in range(5)]) == [True] * 3 + [False] * 2  # the burst, then paced
    assert len(checked) == 3  # the two past the rate were refused unchecked
    assert counters.drain_peer_faults() == {alice.peer_id: Counter(store_rate=2)}
    assert faults.SWARM[faults.STORE_RATE].cost == 0  # priced, and no one's fault
    now[0] = 1.0  # a second later: two more
    assert store([alice.pointer(round=r) for r in range(10, 14)]) == [True, True, False, False]
    assert storage.held == 5
    # per peer, never per origin: identities on one address each have their own bucket
    fresh = StoreRate(rate=2.0, burst=3, clock=lambda: 0.0)
    assert [fresh.take(f"id{i}", 3) for i in range(6)] == [3] * 6 and fresh.take("id0", 1) == 0
