"""A node's identity: one RSA key that is both its libp2p peer id and the signer of its records.

Why one key: a receiver accepts a group only when its sender is the key that signed the
pointer (docs/method.md, Wire). With the libp2p identity and the record-signing key being the
same RSA key, anyone can derive the peer id from the public key in a record's subkey
(`peer_id_from_public_key`), and the body then comes over a libp2p stream that the same
key authenticates.

The identity file is libp2p's protobuf `PrivateKey` (RSA), the format hivemind's `P2P`
writes and p2pd reads; it is created on first start with mode 0400. A lock file next to
it (`flock`, released by the kernel when the process dies, SIGKILL included) keeps a
second process on this machine from running as the same peer. A copy of the file on
another machine is not detected: two peers with one id would steal each other's streams.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import base58
import multihash
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from google.protobuf.message import DecodeError
from hivemind.p2p import P2P
from hivemind.proto import crypto_pb2
from hivemind.utils.crypto import RSAPrivateKey

from ftis_swarm.swarm.errors import SwarmError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Identity:
    """The private key, its peer id (base58) and the file p2pd reads it from."""

    private_key: RSAPrivateKey
    peer_id: str
    path: Path

    @property
    def public_key(self) -> bytes:
        """OpenSSH encoding, the form `RSASignatureValidator` puts in `[owner:...]`."""
        return self.private_key.get_public_key().to_bytes()


@functools.lru_cache(maxsize=4096)
def peer_id_from_public_key(openssh_key: bytes) -> str:
    """The libp2p peer id of an RSA public key: base58 of the sha2-256 multihash of its protobuf.

    Raises ValueError when `openssh_key` is not an RSA public key.
    """
    key = serialization.load_ssh_public_key(openssh_key)
    if not isinstance(key, rsa.RSAPublicKey):
        raise ValueError("not an RSA public key")
    der = key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    proto = crypto_pb2.PublicKey(key_type=crypto_pb2.RSA, data=der).SerializeToString()
    digest = multihash.encode(hashlib.sha256(proto).digest(), multihash.coerce_code("sha2-256"))
    return base58.b58encode(digest).decode()


def load_identity(path: Path) -> Identity:
    """Reads an identity file written by `create_identity` (or by hivemind's P2P)."""
    try:
        proto = crypto_pb2.PrivateKey.FromString(path.read_bytes())
        if proto.key_type != crypto_pb2.KeyType.RSA:
            raise ValueError(f"key type {proto.key_type} is not RSA")
        private_key = RSAPrivateKey.__new__(RSAPrivateKey)
        private_key.__setstate__({"_private_key": proto.data})  # the class's own unpickling path
    except (OSError, ValueError, TypeError, DecodeError) as exc:
        raise SwarmError(f"identity file {path} is not a readable RSA libp2p key: {exc}") from exc
    public = private_key.get_public_key().to_bytes()
    return Identity(private_key=private_key, peer_id=peer_id_from_public_key(public), path=path)


def create_identity(path: Path) -> Identity:
    """Writes a fresh RSA identity to `path` (mode 0400) and returns it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    P2P.generate_identity(str(path))
    identity = load_identity(path)
    logger.info("created identity %s for peer %s", path, identity.peer_id)
    return identity


class IdentityLock:
    """An exclusive lock on `<identity>.lock`, held for the life of the process."""

    def __init__(self, identity_path: Path):
        self.identity_path = identity_path
        self.path = identity_path.with_name(identity_path.name + ".lock")
        self._fd: Optional[int] = None

    def acquire(self) -> "IdentityLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise SwarmError(
                f"identity {self.identity_path} is already in use by another running process "
                f"(pid {holder}); stop it or pass another --identity"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


class NodeIdentity:
    """The identity a node runs with: its persistent file (locked), or a throwaway one.

    `identity_path=None` makes a fresh key in a private temporary folder, removed on `close`.
    """

    def __init__(self, identity_path: Optional[Path]):
        self._lock: Optional[IdentityLock] = None
        self._tmpdir: Optional[str] = None
        if identity_path is None:
            self._tmpdir = tempfile.mkdtemp(prefix="ftis-identity-")
            self.identity = create_identity(Path(self._tmpdir) / "identity.key")
            return
        self._lock = IdentityLock(identity_path).acquire()
        try:
            self.identity = load_identity(identity_path) if identity_path.exists() else create_identity(identity_path)
        except BaseException:
            self._lock.release()
            raise

    def close(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None
        if self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None
