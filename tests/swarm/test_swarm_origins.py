"""Network origins: the prefix of a connection's address, read from real p2pd daemons on 127.0.N.1,
and the storage quota by origin on real signed records."""

from __future__ import annotations

import asyncio
import time

from hivemind.dht.routing import DHTID
from hivemind.p2p import P2P
from record_peers import RUN, SER, Peer, Scores, W

from ftis_swarm.swarm.dht.origin_quota import OriginQuotaStorage
from ftis_swarm.swarm.keys import pointer_key
from ftis_swarm.swarm.origins import DIRECT, RELAYED, OriginBook, origin_of_maddr


def test_an_origin_is_the_prefix_of_the_address_and_relayed_peers_share_one():
    v4, v6 = dict(prefix_v4=24, prefix_v6=48), dict(prefix_v4=16, prefix_v6=64)
    assert origin_of_maddr("/ip4/203.0.113.77/tcp/31337", **v4) == "203.0.113.0/24"
    assert origin_of_maddr("/ip4/203.0.113.77/tcp/31337", **v6) == "203.0.0.0/16"
    assert origin_of_maddr("/ip6/2001:db8:abcd:12::1/tcp/4001", **v4) == "2001:db8:abcd::/48"
    assert origin_of_maddr("/ip6/2001:db8:abcd:12::1/tcp/4001", **v6) == "2001:db8:abcd:12::/64"
    relayed = "/ip4/198.51.100.1/tcp/4001/p2p/QmRelay/p2p-circuit"
    assert origin_of_maddr(relayed, **v4) == RELAYED  # the relay's address is not the peer's
    assert origin_of_maddr("/dns4/example.org/tcp/1", **v4) is None
    assert origin_of_maddr("/ip4/not-an-address/tcp/1", **v4) is None


def test_daemons_on_their_own_loopback_addresses_see_each_others_origins():
    async def run() -> tuple:
        first = await P2P.create(host_maddrs=["/ip4/127.0.1.1/tcp/0"])
        maddrs = [str(m) for m in await first.get_visible_maddrs()]
        second = await P2P.create(host_maddrs=["/ip4/127.0.2.1/tcp/0"], initial_peers=maddrs)
        try:
            book = OriginBook(first, prefix_v4=24, prefix_v6=48)
            wide = OriginBook(first, prefix_v4=8, prefix_v6=48)
            deadline = time.monotonic() + 20.0
            while await book.lookup(second.peer_id.to_base58()) is None and time.monotonic() < deadline:
                await asyncio.sleep(0.6)  # past the book's least interval between two reads
            await wide.refresh()
            return (book.origin_of(second.peer_id.to_base58()), wide.origin_of(second.peer_id.to_base58()),
                    book.origin_of(first.peer_id.to_base58()), book.paths(), book.connections(),
                    second.peer_id.to_base58())
        finally:
            await second.shutdown()
            await first.shutdown()

    seen, wide, itself, paths, connections, second_id = asyncio.run(run())
    assert seen == "127.0.2.0/24" and wide == "127.0.0.0/8"
    assert itself is None  # no connection to itself
    # how it reaches the peer: over the one direct connection, at the address the peer dialed from
    assert paths == {second_id: DIRECT}
    assert list(connections) == [second_id] and len(connections[second_id]) == 1
    assert connections[second_id][0].startswith("/ip4/127.0.2.1/tcp/")


def _admit(storage: OriginQuotaStorage, record, owner: str, requester: str, origin) -> str:
    return storage.admit(DHTID.from_bytes(record.key), SER.loads(record.subkey), record.value,
                         record.expiration_time, owner=owner, requester=requester, origin=origin)


def test_storage_holds_at_most_its_quota_from_one_origin_whatever_the_identities():
    storage = OriginQuotaStorage(self_id="me", policy=Scores(), is_dht_peer=lambda peer: False, max_records=1000,
                                 max_records_per_peer=3, max_records_per_origin=5)
    crowd = [Peer() for _ in range(4)]
    answers = [_admit(storage, p.pointer(), p.peer_id, p.peer_id, "10.0.0.0/24") for p in crowd for _ in range(2)]
    assert answers == [""] * 5 + ["origin_quota"] * 3
    honest = Peer()
    assert _admit(storage, honest.pointer(), honest.peer_id, honest.peer_id, "10.0.1.0/24") == ""
    assert _admit(storage, honest.pointer(), honest.peer_id, honest.peer_id, None) == ""  # no origin: identity only
    assert storage.by_origin == {"10.0.0.0/24": 5, "10.0.1.0/24": 1}
    stale = Peer()
    record = stale.pointer()
    expiring = stale.sign(pointer_key(RUN, stale.peer_id, W), SER.loads(record.subkey),
                          SER.loads(stale.checker.strip_value(record)), time.time() + 0.5)
    assert _admit(storage, expiring, stale.peer_id, stale.peer_id, "10.0.2.0/24") == ""
    time.sleep(0.6)
    assert _admit(storage, crowd[0].pointer(), crowd[0].peer_id, crowd[0].peer_id, "10.0.0.0/24") == "origin_quota"
    assert _admit(storage, Peer().pointer(), "carol", "carol", "10.0.2.0/24") == ""  # the expired one left room
    assert storage.by_origin == {"10.0.0.0/24": 5, "10.0.1.0/24": 1, "10.0.2.0/24": 1}
    assert storage.store_subkey(DHTID.generate(), b"own", b"v", time.time() + 60)  # own records: no origin

