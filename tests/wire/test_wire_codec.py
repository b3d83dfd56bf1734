"""Wire format v1: round trips, the committed example, sizes and every validation rule."""

from __future__ import annotations

from pathlib import Path

import msgpack
import numpy as np
import pytest
from wire_samples import EXAMPLE_PATH, V1_EXAMPLE_PATH, example_group, random_group

from ftis_swarm.config import WireConfig
from ftis_swarm.wire import WireError, content_id, decode_group, encode_group
from ftis_swarm.wire.group import WireVersionError

ROOT = Path(__file__).resolve().parents[2]


def test_committed_example_decodes_and_matches_its_definition():
    data = (ROOT / EXAMPLE_PATH).read_bytes()
    group = decode_group(data, vocab_size=49152)
    assert group.G == 4 and group.completion_lengths == [5, 9, 3, 7]
    assert group.task_id == "arith" and group.policy_version == 7 and group.temperature == 0.7
    # The encoding is canonical and stable: rebuilding the example gives the committed bytes.
    assert encode_group(example_group()) == data
    assert group.group_id == content_id(data) == example_group().group_id
    assert group.task_digest == "fedcba9876543210fedcba9876543210" and not group.aligned


def test_the_v1_example_is_refused_as_another_version():
    with pytest.raises(WireVersionError, match="wire version 1 .another release.; this node reads version 2"):
        decode_group((ROOT / V1_EXAMPLE_PATH).read_bytes(), vocab_size=49152)


def test_round_trip_is_bit_for_bit():
    rng = np.random.default_rng(1)
    for _ in range(50):
        g = random_group(rng)
        data = encode_group(g)
        back = decode_group(data)
        assert encode_group(back) == data
        for a, b in zip(g.completion_ids, back.completion_ids):
            assert a.dtype == b.dtype == np.uint32 and np.array_equal(a, b)
        for a, b in zip(g.logp_gen, back.logp_gen):
            assert a.tobytes() == b.tobytes()
        assert (back.run_id, back.sender, back.created_at) == (g.run_id, g.sender, g.created_at)


def test_decoded_arrays_are_views_of_one_buffer():
    back = decode_group(encode_group(random_group(np.random.default_rng(2), G=4, length=10)))
    base = back.completion_ids[0].base
    assert base is not None and all(c.base is base for c in back.completion_ids)


def test_size_per_completion_token_at_paper_scale():
    """G = 12 completions of 512 tokens: at most 8.05 bytes per token, prompt ids (4 B each) aside."""
    g = random_group(np.random.default_rng(3), G=12, length=512)
    data = encode_group(g)
    per_token = (len(data) - 4 * g.prompt_ids.size) / (12 * 512)
    assert 8.0 < per_token <= 8.05


def test_group_id_is_a_content_hash():
    rng = np.random.default_rng(4)
    g = random_group(rng)
    assert g.group_id == decode_group(encode_group(g)).group_id
    other = random_group(rng)
    assert g.group_id != other.group_id and len(g.group_id) == 32


def _record(group):
    return msgpack.unpackb(encode_group(group), raw=False)


def _pack(rec):
    return msgpack.packb(rec, use_bin_type=True)


def _bin(arr, dtype):
    return np.asarray(arr, dtype=dtype).tobytes()


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda r: r.update(v=3), "wire version 3"),
        (lambda r: r.update(pv=-1), "policy version"),
        (lambda r: r.update(T=0.0), "temperature"),
        (lambda r: r.update(T=1e-300), "temperature"),
        (lambda r: r.update(T=0.0499), "temperature"),
        (lambda r: r.update(T=10.5), "temperature"),
        (lambda r: r.update(T=float("nan")), "temperature"),
        (lambda r: r.update(ts=float("nan")), "creation time"),
        (lambda r: r.update(run=""), "'run'"),
        (lambda r: r.update(mdl=b"bytes"), "'mdl'"),
        (lambda r: r.update(snd="x" * 129), "'snd'"),
        (lambda r: r.update(tok=r["tok"][:-4]), "lengths add up"),
        (lambda r: r.update(tok=r["tok"][:-1]), "multiple of 4"),
        (lambda r: r.update(lp=_bin([0.5] * (len(r["lp"]) // 4), "<f4")), "finite and <= 0"),
        (lambda r: r.update(lp=_bin([np.nan] * (len(r["lp"]) // 4), "<f4")), "finite and <= 0"),
        (lambda r: r.update(p=b""), "prompt has 0 tokens"),
        (lambda r: r.update(n=_bin([len(r["tok"]) // 4], "<u4")), "1 completions"),
        (lambda r: r.update(extra=1), "fields"),
        (lambda r: r.pop("lp"), "fields"),
    ],
)
def test_invalid_fields_are_refused_with_a_reason(change, message):
    rec = _record(random_group(np.random.default_rng(5), G=3, length=4))
    change(rec)
    with pytest.raises(WireError, match=message):
        decode_group(_pack(rec))


def test_temperatures_at_the_bounds_are_accepted():
    for T in (0.05, 10.0):
        rec = _record(random_group(np.random.default_rng(7), G=2, length=3))
        rec["T"] = T
        assert decode_group(_pack(rec)).temperature == T


def test_zero_length_completion_refused():
    rec = _record(random_group(np.random.default_rng(6), G=3, length=4))
    rec["n"] = _bin([0, 8, 4], "<u4")
    with pytest.raises(WireError, match="completion lengths"):
        decode_group(_pack(rec))


def test_limits_and_vocabulary():
    g = random_group(np.random.default_rng(7), G=5, length=20, vocab=1000)
    data = encode_group(g)
    with pytest.raises(WireError, match="5 completions"):
        decode_group(data, limits=WireConfig(max_group_size=4))
    with pytest.raises(WireError, match="completion lengths"):
        decode_group(data, limits=WireConfig(max_completion_tokens=19))
    with pytest.raises(WireError, match="outside the vocabulary"):
        decode_group(data, vocab_size=int(max(c.max() for c in g.completion_ids)))
    big = random_group(np.random.default_rng(8), G=16, length=8192)
    with pytest.raises(WireError, match="over the limit"):
        decode_group(encode_group(big))
    assert decode_group(data, vocab_size=1000).G == 5


def test_non_canonical_encodings_are_refused():
    g = random_group(np.random.default_rng(9), G=2, length=3)
    rec = _record(g)
    reordered = dict(reversed(list(rec.items())))
    with pytest.raises(WireError, match="canonical order"):
        decode_group(_pack(reordered))
    # Same content, but the float packed as float32 instead of float64.
    rec["T"] = 0.5
    as_f32 = msgpack.packb(rec, use_bin_type=True, use_single_float=True)
    with pytest.raises(WireError, match="canonical"):
        decode_group(as_f32)


def test_not_a_map_and_ext_types_and_garbage():
    for data in (b"", b"\xc1", _pack([1, 2, 3]), _pack(5), msgpack.packb(msgpack.ExtType(1, b"x")), b"\x00" * 10):
        with pytest.raises(WireError):
            decode_group(data)
