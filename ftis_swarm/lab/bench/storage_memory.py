"""What one record stored for others costs in memory: `measure_record_memory`, printed by `bench hostile`.

In one process, with no network: `signers` identities sign `n` valid pointers between them;
their store requests (serialized, then parsed again, as they arrive) pass the real
`DHTServicer.rpc_store` path (strict decode, `RecordChecker.examine` with its RSA check and
its memory of accepted verdicts, `GuardedStorage.admit`). The figures: resident memory
growth per record, and `tracemalloc`'s split between the storage (hivemind's dictionary,
the guard's indexes, the subkey and value bytes) and the checker's remembered verdicts.
`GuardedStorage` charges each record `len(subkey) + len(value) + RECORD_OVERHEAD`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import os
import secrets
import time
import tracemalloc
from types import SimpleNamespace

from hivemind.dht.protocol import DHTProtocol
from hivemind.p2p import P2PContext, PeerID
from hivemind.proto import dht_pb2
from hivemind.utils.crypto import RSAPrivateKey

from ftis_swarm.config import PuzzleConfig
from ftis_swarm.lab.hostile.base import Signer
from ftis_swarm.peers.policy import ALLOW_ALL
from ftis_swarm.swarm.counters import SwarmCounters
from ftis_swarm.swarm.dht.guard import DHTServicer
from ftis_swarm.swarm.dht.storage import RECORD_OVERHEAD, GuardedStorage
from ftis_swarm.swarm.dht.validators import RecordChecker
from ftis_swarm.swarm.keys import key_id, pointer_key, window_of
from ftis_swarm.swarm.puzzle import PuzzleVerifier
from ftis_swarm.swarm.records import RECORD_VERSION, make_subkey, round_name

_RUN, _TTL, _WINDOW = "bench-memory", 600.0, 30.0
_CHUNK = 64
_PUZZLE = PuzzleConfig(bits=0, log2_n=6, r=1)
"""A puzzle that costs nothing: the figure is the memory of a record, not of an identity."""


@dataclasses.dataclass(frozen=True)
class RecordMemory:
    records: int
    wire_bytes: float
    """Subkey and value bytes of one record."""
    rss_bytes: float
    """Resident memory growth per stored record (no tracing)."""
    storage_bytes: float
    """Traced bytes per record held by the storage (hivemind's dictionary, the guard's indexes, the bytes)."""
    checker_bytes: float
    """Traced bytes per record held by the checker's memory of accepted verdicts (parsed records)."""
    charged_bytes: float
    """What `GuardedStorage` charges one record (`held_bytes / held`)."""


def _requests(n: int, signers: int) -> list[tuple[str, bytes]]:
    w, now = window_of(time.time(), _WINDOW), time.time()
    out = []
    for _ in range(signers):
        signer = Signer(RSAPrivateKey(), {"run_id": _RUN, "puzzle": _PUZZLE.model_dump()})
        kid = key_id(pointer_key(_RUN, signer.peer_id, w))
        items = []
        for number in range(n // signers):  # one round pointer of one group each, as a round of one
            subkey = make_subkey(signer.public_key, round_name(number))
            value = {"v": RECORD_VERSION, "publisher": signer.peer_id, "run_id": _RUN, "tokenizer_fp": "bench",
                     "window": w, "round": number, "puzzle": signer.puzzle,
                     "groups": [{"sha256": secrets.token_bytes(32), "size": 4096, "created_at": now, "tokens": 64}]}
            signed = signer.sign(kid, subkey, DHTProtocol.serializer.dumps(value), now + _TTL)
            items.append((DHTProtocol.serializer.dumps(subkey), signed))
        for i in range(0, len(items), _CHUNK):
            chunk = items[i:i + _CHUNK]
            request = dht_pb2.StoreRequest(keys=[kid.to_bytes()] * len(chunk), subkeys=[s for s, _ in chunk],
                                           values=[v for _, v in chunk], expiration_time=[now + _TTL] * len(chunk),
                                           in_cache=[False] * len(chunk))
            out.append((signer.peer_id, request.SerializeToString()))
    return out


def _store_all(requests: list[tuple[str, bytes]], *, trace: bool) -> tuple[GuardedStorage, int, int, dict]:
    me = RSAPrivateKey()
    storage = GuardedStorage(self_id="me", policy=ALLOW_ALL, is_dht_peer=lambda peer: False, max_records=1 << 30,
                             max_records_per_peer=1 << 30)
    checker = RecordChecker(me, puzzles=PuzzleVerifier(_PUZZLE), max_record_bytes=4096, ttl=_TTL, max_clock_skew=30.0,
                            capacity=1 << 30)
    servicer = DHTServicer(protocol=SimpleNamespace(node_info=dht_pb2.NodeInfo()), storage=storage, checker=checker,
                           policy=ALLOW_ALL, counters=SwarmCounters())
    wire = 0

    async def run() -> None:
        nonlocal wire
        for peer, raw in requests:
            request = dht_pb2.StoreRequest.FromString(raw)
            wire += sum(len(s) + len(v) for s, v in zip(request.subkeys, request.values))
            context = P2PContext(handle_name="rpc_store", local_id=PeerID(b"me"), remote_id=PeerID.from_base58(peer))
            response = await servicer.rpc_store(request, context)
            if not all(response.store_ok):
                raise RuntimeError("a valid record was refused while measuring")

    gc.collect()
    before = _rss()
    if trace:
        tracemalloc.start()
    asyncio.run(run())
    gc.collect()
    split: dict = {}
    if trace:
        snapshot = tracemalloc.take_snapshot()
        tracemalloc.stop()
        for stat in snapshot.statistics("filename"):
            name = stat.traceback[0].filename
            part = "checker" if any(k in name for k in ("validators.py", "records.py", "pydantic")) else "storage"
            split[part] = split.get(part, 0) + stat.size
    return storage, wire, _rss() - before, split


def measure_record_memory(n: int = 4000, *, signers: int = 10) -> RecordMemory:
    """Stores `n` valid pointers of `signers` identities through the servicer, twice (plain, then traced)."""
    storage, wire, rss, _ = _store_all(_requests(n, signers), trace=False)
    held = storage.held
    charged = storage.held_bytes / held
    del storage
    traced, _, _, split = _store_all(_requests(n, signers), trace=True)
    return RecordMemory(records=held, wire_bytes=wire / held, rss_bytes=rss / held,
                        storage_bytes=split.get("storage", 0) / traced.held,
                        checker_bytes=split.get("checker", 0) / traced.held, charged_bytes=charged)


def format_record_memory(m: RecordMemory) -> str:
    return (f"one stored record ({m.records} pointers of 10 identities through the DHT servicer): "
            f"{m.wire_bytes:.0f} B subkey+value, RSS +{m.rss_bytes:.0f} B; traced {m.storage_bytes:.0f} B in storage "
            f"+ {m.checker_bytes:.0f} B in the checker's remembered verdicts; charged {m.charged_bytes:.0f} B "
            f"(RECORD_OVERHEAD {RECORD_OVERHEAD})")


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
