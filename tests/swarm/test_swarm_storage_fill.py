"""A storage fill by many origins (`swarm/dht/storage.py`): eviction by share, the reserve for known publishers,
and the memory that evicted records leave behind, on real signed records through `OriginQuotaStorage.admit`."""

from __future__ import annotations

import time
from collections import Counter

import pytest
from hivemind.dht.routing import DHTID
from record_peers import RUN, SER, Peer, Scores

from ftis_swarm.lab.bench.fill import run_fill
from ftis_swarm.swarm.dht.origin_quota import OriginQuotaStorage
from ftis_swarm.swarm.keys import pointer_key
from ftis_swarm.swarm.records import make_subkey, round_name


def _storage(policy: Scores = None, **limits) -> OriginQuotaStorage:
    return OriginQuotaStorage(self_id="me", policy=policy or Scores(), is_dht_peer=lambda peer: False,
                              **{"max_records": 40, "max_records_per_peer": 1000, "max_records_per_origin": 1000,
                                 **limits})


class _Records:
    """Signed pointers of one identity under distinct keys and subkeys, admitted as any owner from any origin
    (storage trusts the checker for who signed what: only the counts matter here)."""

    def __init__(self) -> None:
        self.peer, self.n = Peer(), 0

    def admit(self, storage: OriginQuotaStorage, owner: str, origin: str, *, requester: str = "") -> str:
        self.n += 1
        record = self.peer.sign(pointer_key(RUN, self.peer.peer_id, self.n),
                                make_subkey(self.peer.public_key, round_name(self.n)), {"n": self.n})
        return storage.admit(DHTID.from_bytes(record.key), SER.loads(record.subkey), record.value,
                             record.expiration_time, owner=owner, requester=requester or owner, origin=origin)


def _origins(storage: OriginQuotaStorage) -> Counter:
    return Counter(entry.origin for entry in storage._entries.values())


def test_a_fill_by_many_origins_cannot_keep_a_lighter_origins_publisher_out():
    records, storage = _Records(), _storage()
    crowd = [f"10.0.{i}.0/24" for i in range(8)]
    answers = Counter(records.admit(storage, f"crowd{i}-{k}", crowd[i]) for k in range(20) for i in range(8))
    assert answers == {"": 40, "storage_full": 120}  # origins in turn: equal shares, so no one evicts another
    assert storage.held == 40 and storage.held_bytes > 0
    counts = _origins(storage)
    assert sorted(counts.values()) == [5] * 8, counts  # each crowd origin ends at its share
    # an honest publisher of another origin, never seen before (rank 1 like the crowd): it gets an equal share
    # (40 / 9 origins), each record evicting the newest of the heaviest crowd origin
    assert [records.admit(storage, "honest", "10.9.9.0/24") for _ in range(5)] == [""] * 4 + ["storage_full"]
    assert storage.held == 40 and _origins(storage)["10.9.9.0/24"] == 4
    assert sorted(_origins(storage).values()) == [4] * 5 + [5] * 4
    assert storage.evicted == {"share": 4}
    # a crowd origin at its share cannot take the honest records back; only an equal origin's, one at a time
    before = storage.by_origin["10.9.9.0/24"]
    for k in range(30):
        records.admit(storage, f"crowd0-late{k}", crowd[0])
    assert storage.by_origin["10.9.9.0/24"] == before
    assert storage.by_origin[crowd[0]] <= before + 1


def test_the_reserve_is_kept_for_publishers_that_published_before():
    records, storage = _Records(), _storage(reserve=0.25, known_after=0.3)
    assert records.admit(storage, "honest", "10.9.9.0/24") == ""  # its history starts here
    assert not storage.known("honest")
    time.sleep(0.35)
    assert storage.known("honest") and not storage.known("crowd0-0")
    # new identities of many origins: at most 30 of the 40 records (the first honest one was stored new, rank 1)
    answers = Counter(records.admit(storage, f"crowd{i}-{k}", f"10.0.{i}.0/24") for k in range(10) for i in range(10))
    assert answers["storage_full"] > 0
    assert storage.held == 30 and _origins(storage)["10.9.9.0/24"] == 1
    # the known publisher: into the reserve, then past it by share, never refused
    assert [records.admit(storage, "honest", "10.9.9.0/24") for _ in range(12)] == [""] * 12
    assert _origins(storage)["10.9.9.0/24"] == 13 and storage.held == 40
    # new identities, even of new origins, evict no known publisher's record (rank 2 above theirs)
    for k in range(20):
        records.admit(storage, f"newcomer{k}", f"10.1.{k}.0/24")
    assert _origins(storage)["10.9.9.0/24"] == 13
    # the first honest record, stored before its owner was known, is kept as a known one now
    assert sum(entry.rank == 2 for entry in storage._entries.values() if entry.owner == "honest") == 13


def test_strangers_and_records_of_no_origin_evict_by_rank_only():
    records, storage = _Records(), _storage(max_records=64)
    for k in range(64):
        assert records.admit(storage, f"crowd-{k}", "10.0.0.0/24") == ""
    # a record relayed by a third peer (rank 0) evicts nobody, whatever its origin
    assert records.admit(storage, "signer", "10.9.9.0/24", requester="relay") == "storage_full"
    # an owner storing its own record with no known origin: no share to compare, equal rank, refused
    assert records.admit(storage, "honest", None) == "storage_full"
    assert storage.evicted == Counter()


def test_evicted_records_leave_no_dictionaries_or_expiry_entries_behind():
    records, storage = _Records(), _storage(max_records=64)
    for i in range(50):  # origin after origin: each evicts the heaviest ones' records down to an equal share
        for k in range(64):
            records.admit(storage, f"crowd{i}-{k}", f"10.0.{i}.0/24")
    assert storage.held == 64 and max(storage.by_origin.values()) - min(storage.by_origin.values()) <= 1
    assert storage.evicted["share"] > 200 and storage.evicted["rank"] == 0
    assert len(storage.data) == 64  # one key each: emptied dictionaries are deleted with their last record
    assert len(storage._expiry) <= 2 * 64 + 64 + 1  # the evicted records' expiries are dropped, not kept to expiry
    assert len(storage.expiration_heap) <= 2 * 64 + 64 + 1


@pytest.mark.net
@pytest.mark.slow
def test_a_fill_by_several_origins_leaves_honest_publishes_succeeding_within_the_caps(swarm, tmp_path):
    """Real daemons: a bootstrap, 3 nodes and 4 fillers, each on its own 127.0.N.1 (origin); the fillers hold no
    one's records, so a publish succeeds only when both other nodes took it. 4 x 100 fill records against
    192 slots, 64 an origin: without the reserve and eviction by share, the nodes refuse each other's new
    records once full (`storage_full`)."""
    base = swarm.config(run_id="fill", peers=[], ttl=20.0, max_clock_skew=5.0, max_stored_records=192,
                        max_records_per_peer=64, max_records_per_origin=64, storage_reserve=0.25,
                        known_publisher_after=4.0)
    bench = run_fill(base, logs=tmp_path, nodes=3, fillers=4, per_filler=100, rounds=3, deadline=1.0)
    before, fill, after = bench.phases
    assert before.ok == before.publishes > 0, before
    assert fill.ok_share >= 0.95 and after.ok_share >= 0.95, (fill, after)
    # the fill reached the caps: every node took more than its storage holds, and held no more than it may;
    # new identities fill the storage outside the reserve (192 x 0.75 = 144 records), no further
    assert min(bench.accepted.values()) >= 144, bench.accepted
    for phase in (fill, after):
        assert 144 <= phase.held_max <= 192 and phase.held_bytes_max <= base.records.max_stored_bytes
        assert phase.crowd_origin_max <= 64
