"""What the hostile peer's parts share: `Signer` (an identity that signs records), and `HostilePeer`,
what floods.py and gossip.py read of the peer that runs them (peer.py's `Hostile`), so that
neither imports the peer back.
"""

from __future__ import annotations

from typing import Any, Protocol

from hivemind.dht.crypto import RSASignatureValidator
from hivemind.dht.node import DHTNode
from hivemind.dht.protocol import DHTProtocol
from hivemind.dht.routing import DHTID
from hivemind.dht.validation import DHTRecord
from hivemind.p2p import P2P, PeerID
from hivemind.utils.crypto import RSAPrivateKey

from ftis_swarm.config import PuzzleConfig
from ftis_swarm.swarm.identity import peer_id_from_public_key
from ftis_swarm.swarm.puzzle import solve

SER = DHTProtocol.serializer


class Signer:
    """One RSA identity that signs records (its peer id derived from its public key), its puzzle
    solved for the run as an honest node solves it (`settings["puzzle"]`, the run's `PuzzleConfig`)."""

    def __init__(self, key: RSAPrivateKey, settings: dict):
        self.key, self._rsa = key, RSASignatureValidator(key)
        self.public_key = key.get_public_key().to_bytes()
        self.peer_id = peer_id_from_public_key(self.public_key)
        self.puzzle, self.tries = solve(self.public_key, settings["run_id"], PuzzleConfig(**settings.get("puzzle", {})))

    def sign(self, kid: DHTID, subkey: bytes, value: bytes, expiration: float) -> bytes:
        """Signs with this key, whoever the subkey names as owner."""
        record = DHTRecord(kid.to_bytes(), SER.dumps(subkey), value, expiration)
        return value + b"[signature:" + self.key.sign(self._rsa._serialize_record(record)) + b"]"


class HostilePeer(Protocol):
    """The running hostile peer as its floods see it."""

    s: dict
    """Its settings (peer.py's docstring)."""
    host: str
    me: Signer
    node: DHTNode
    p2p: P2P
    floods: Any
    """Its `floods.Floods`."""

    async def honest_peers(self, kid: DHTID) -> list[PeerID]: ...
