"""What an identity costs: a memory-hard puzzle bound to its public key and the run id.

In the style of S/Kademlia's crypto puzzles, but with scrypt in place of a plain hash, so
that a GPU or an ASIC buys little over a CPU core (each try needs 128 x r x N bytes of
memory: 16 MiB at the defaults). An identity's puzzle is a nonce such that

    scrypt(password=sha256(DOMAIN | run id | 0 | OpenSSH public key), salt=nonce, N, r, p=1)

has at least `bits` leading zero bits: 2^bits tries are expected, one to verify. The nonce
is stored beside the identity file (`<identity>.puzzle`, JSON) and travels in every
record the identity signs (`records.GroupPointer.puzzle`, `MemberRecord.puzzle`); a node
solves it once per identity and run, then reads it back at each start.

`PuzzleVerifier` checks the nonces that records carry: each (key, run id, nonce) once, the
verdict remembered (a bounded LRU, good and bad ones apart, so a flood of bad nonces
cannot push good identities out). New identities are verified at most at a token bucket's
rate: over it a record is refused as `puzzle_busy`, which is no fault of the sender (it may
be an honest newcomer; the DHT reader offers the record again at its next poll, the gossip
gate keeps a few such messages and offers them again once `has_room`), so a flood of new
identities costs this node at most `verify_rate` scrypt runs a second.

Unknown identities come first: a key that ever showed a bad nonce (a `suspect`, remembered
apart; an honest identity has one nonce per run, and it solves) has a new nonce verified
only while more than half of `verify_burst` is left. A flood of fresh nonces for a few
keys then spends at most the upper half of the bucket, and an identity never seen always
finds the lower half. See docs/swarm.md (Identities).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import time
from collections import OrderedDict
from pathlib import Path
from typing import Optional

from ftis_swarm.config import PuzzleConfig
from ftis_swarm.peers import faults

logger = logging.getLogger(__name__)

DOMAIN = b"ftis-swarm identity puzzle v1\0"
NONCE_BYTES = 8
NONCE_PATTERN = r"^[0-9a-f]{16}$"
"""A nonce as records carry it: 16 lowercase hex digits."""
PUZZLE_FILE_VERSION = 1


def challenge(public_key: bytes, run_id: str) -> bytes:
    """What the nonce is bound to: this key, in this run."""
    return hashlib.sha256(DOMAIN + run_id.encode() + b"\0" + public_key).digest()


def _scrypt(seed: bytes, nonce: bytes, cfg: PuzzleConfig) -> bytes:
    n = 1 << cfg.log2_n
    return hashlib.scrypt(seed, salt=nonce, n=n, r=cfg.r, p=1, maxmem=129 * cfg.r * n + (1 << 20), dklen=32)


def _leading_zeros_ok(digest: bytes, bits: int) -> bool:
    return int.from_bytes(digest, "big") >> (256 - bits) == 0 if bits else True


def solves(public_key: bytes, run_id: str, nonce_hex: str, cfg: PuzzleConfig) -> bool:
    """Whether `nonce_hex` solves the puzzle of `public_key` in `run_id` at `cfg` (one scrypt)."""
    nonce = bytes.fromhex(nonce_hex)
    return _leading_zeros_ok(_scrypt(challenge(public_key, run_id), nonce, cfg), cfg.bits)


def solve(public_key: bytes, run_id: str, cfg: PuzzleConfig) -> tuple[str, int]:
    """(nonce in hex, tries): tries nonces from a random start until one solves the puzzle."""
    seed = challenge(public_key, run_id)
    start = int.from_bytes(secrets.token_bytes(NONCE_BYTES), "big")
    tries = 0
    while True:
        nonce = ((start + tries) % (1 << 64)).to_bytes(NONCE_BYTES, "big")
        tries += 1
        if _leading_zeros_ok(_scrypt(seed, nonce, cfg), cfg.bits):
            return nonce.hex(), tries


def puzzle_path(identity_path: Path) -> Path:
    return identity_path.with_name(identity_path.name + ".puzzle")


def _settings(run_id: str, cfg: PuzzleConfig) -> dict:
    return {"v": PUZZLE_FILE_VERSION, "run_id": run_id, "bits": cfg.bits, "log2_n": cfg.log2_n, "r": cfg.r}


def load_or_solve(identity_path: Path, public_key: bytes, run_id: str, cfg: PuzzleConfig) -> str:
    """The identity's nonce for `run_id`: read from `<identity>.puzzle` when it was solved at these
    settings (and still solves), else solved now and written there (atomically, mode 0600)."""
    path = puzzle_path(identity_path)
    wanted = _settings(run_id, cfg)
    try:
        stored = json.loads(path.read_text())
        if {k: stored.get(k) for k in wanted} == wanted and solves(public_key, run_id, stored["nonce"], cfg):
            return stored["nonce"]
        logger.info("the puzzle in %s is for other settings or another key; solving a new one", path)
    except FileNotFoundError:
        pass
    except (OSError, ValueError, KeyError, TypeError) as exc:
        logger.warning("ignoring the unreadable puzzle file %s (%s); solving a new one", path, exc)
    started = time.process_time()
    nonce, tries = solve(public_key, run_id, cfg)
    logger.info("solved this identity's puzzle for run %s in %d tries, %.1f CPU s", run_id, tries,
                time.process_time() - started)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({**wanted, "nonce": nonce}, f)
    os.replace(tmp, path)
    return nonce


class PuzzleVerifier:
    """Verdicts on the puzzles records carry, remembered, with new ones verified at a bounded rate.

    `check(public_key, run_id, nonce)` is "" (solved), "bad_puzzle" (the sender's fault) or
    "puzzle_busy" (the rate is spent; no one's fault). Runs on one thread (the swarm's loop).
    """

    def __init__(self, cfg: PuzzleConfig, *, capacity: int = 1 << 16, clock=time.monotonic):
        self.cfg = cfg
        self._good: OrderedDict[bytes, None] = OrderedDict()
        self._bad: OrderedDict[bytes, None] = OrderedDict()
        self._suspects: OrderedDict[bytes, None] = OrderedDict()
        """sha256 of each key that showed a bad nonce (32 bytes an entry, at most `capacity`)."""
        self._capacity, self._clock = capacity, clock
        self._reserve = cfg.verify_burst // 2
        """Tokens a suspect's new nonce must leave in the bucket: the unknown identities' share."""
        self._tokens, self._updated = float(cfg.verify_burst), clock()
        self.verified = 0
        """scrypt runs so far (good and bad nonces)."""

    def check(self, public_key: bytes, run_id: str, nonce: str) -> str:
        tag = hashlib.sha256(challenge(public_key, run_id) + nonce.encode()).digest()
        if tag in self._good:
            self._good.move_to_end(tag)
            return ""
        if tag in self._bad:
            return faults.BAD_PUZZLE
        if not self._take_token(keep=self._reserve if self.suspect(public_key) else 0):
            return faults.PUZZLE_BUSY
        self.verified += 1
        ok = solves(public_key, run_id, nonce, self.cfg)
        _remember(self._good if ok else self._bad, tag, self._capacity)
        if not ok:
            _remember(self._suspects, _key_tag(public_key), self._capacity)
        return "" if ok else faults.BAD_PUZZLE

    def suspect(self, public_key: bytes) -> bool:
        """Whether this key showed a bad nonce (in any run) that is still remembered."""
        return _key_tag(public_key) in self._suspects

    def has_room(self) -> bool:
        """Whether an unknown identity's nonce would be verified now (a token is left)."""
        self._refill()
        return self._tokens >= 1

    def _take_token(self, *, keep: int) -> bool:
        self._refill()
        if self._tokens < 1 + keep:
            return False
        self._tokens -= 1
        return True

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(float(self.cfg.verify_burst), self._tokens + (now - self._updated) * self.cfg.verify_rate)
        self._updated = now


def _key_tag(public_key: bytes) -> bytes:
    return hashlib.sha256(public_key).digest()


def _remember(table: OrderedDict, tag: bytes, capacity: int) -> None:
    table[tag] = None
    table.move_to_end(tag)
    if len(table) > capacity:
        table.popitem(last=False)


def nonce_of(value: object) -> Optional[str]:
    """The `puzzle` field of an (unchecked) record value, when it is a nonce in its form."""
    nonce = value.get("puzzle") if isinstance(value, dict) else None
    if isinstance(nonce, str) and len(nonce) == 2 * NONCE_BYTES and all(c in "0123456789abcdef" for c in nonce):
        return nonce
    return None
