"""Fuzz: mutated, truncated and random buffers raise WireError and nothing else; valid ones pass."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from wire_samples import random_group

from ftis_swarm.wire import WireError, decode_group, encode_group


def _decode_or_wire_error(data: bytes) -> bool:
    """True when the buffer decodes (and then re-encodes to itself), False on WireError; any
    other exception propagates and fails the test."""
    try:
        group = decode_group(data, vocab_size=151_669)
    except WireError:
        return False
    assert encode_group(group) == data  # an accepted buffer is the canonical encoding of what it decoded to
    return True


def test_thousands_of_mutations_raise_only_wire_error():
    rng = np.random.default_rng(11)
    outcome: dict[int, list[bool]] = {0: [], 1: [], 2: [], 3: []}
    for i in range(3000):
        data = bytearray(encode_group(random_group(rng, G=int(rng.integers(2, 5)), length=int(rng.integers(1, 6)))))
        kind = i % 4
        if kind == 0:  # flip a few random bytes
            for pos in rng.integers(0, len(data), int(rng.integers(1, 4))):
                data[pos] = int(rng.integers(0, 256))
        elif kind == 1:  # truncate
            data = data[: int(rng.integers(0, len(data)))]
        elif kind == 2:  # insert or delete a byte in the header area
            pos = int(rng.integers(0, min(len(data), 200)))
            data = data[:pos] + bytes([int(rng.integers(0, 256))]) + data[pos:] if rng.random() < 0.5 else data[:pos] + data[pos + 1:]
        else:  # pure random bytes
            data = bytearray(rng.integers(0, 256, int(rng.integers(0, 400)), dtype=np.uint8).tobytes())
        outcome[kind].append(_decode_or_wire_error(bytes(data)))
    assert not any(outcome[1])  # a truncated group never decodes
    assert not any(outcome[3])  # nor do random bytes
    # some byte flips land in ids or log-probs and leave a valid group, which must then decode
    assert 0 < sum(outcome[0]) < len(outcome[0]) // 2


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=512))
def test_arbitrary_bytes_raise_only_wire_error(data):
    _decode_or_wire_error(data)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(2, 12), st.integers(1, 64))
def test_every_valid_group_round_trips(seed, G, length):
    g = random_group(np.random.default_rng(seed), G=G, length=length)
    data = encode_group(g)
    assert _decode_or_wire_error(data)
    assert encode_group(decode_group(data)) == data
