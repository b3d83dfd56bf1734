"""Character-aligned chunks (core/chunks.py) and chunked weights (core/ftis.py, `chunks`), on hand-worked
cases and on the real Qwen and SmolLM2 tokenizers: chunk ratios multiply to the sequence ratio."""

from __future__ import annotations

import math

import pytest
import torch

from ftis_swarm.config import FTISConfig
from ftis_swarm.core.chunks import (
    AlignmentError,
    align_chunks,
    check_alignment,
    check_reencoding,
    chunk_gen_logp,
    chunk_log_ratios,
    chunk_sizes,
)
from ftis_swarm.core.ftis import sample_terms
from ftis_swarm.wire.fingerprint import token_bytes

TEXTS = [
    "12345 + 678 = 13024. The answer is 13024.",
    "  leading spaces,\ttabs\n\n\nand   runs   of    blanks  ",
    "héllo wörld: naïve café, Straße, 日本語のテキスト, Ελληνικά",
    "emoji 🙂👍🏽 and a rare 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𠜎 character",
    "-0.5 * 3 = -1.5\n#### -1.5",
    "",
]


def test_hand_worked_chunks():
    text = b"12 34"
    c = align_chunks(text, [1, 1, 3], [2, 2, 1])  # peer "1","2"," 34"; learner "12"," 3","4": common ends 2, 5
    assert c.peer == (0, 0, 1) and c.learner == (0, 1, 1) and c.n == 2
    lp = torch.tensor([-1.0, -0.5, -0.25])  # learner
    gen = torch.tensor([-0.2, -0.3, -2.0])  # peer
    assert chunk_log_ratios(lp, gen, c).tolist() == pytest.approx([-1.0 + 0.5, -0.75 + 2.0])
    assert chunk_gen_logp(gen, c).tolist() == pytest.approx([-0.5, 0.0, -2.0])
    assert chunk_sizes(c) == [1, 2]


def test_no_boundary_inside_a_character_and_a_stop_is_its_own_chunk():
    text = "é".encode()  # 2 bytes; both sides split it after the first byte: not a boundary
    c = align_chunks(text, [1, 1, 0], [1, 1, 0])
    assert c.peer == (0, 0, 1) and c.learner == (0, 0, 1) and c.n == 2
    with pytest.raises(ValueError):
        align_chunks(text, [2, 0], [2])  # the peer stopped, the learner's re-encoding does not


@pytest.fixture(scope="module")
def tokenizers():
    from transformers import AutoTokenizer

    from ftis_swarm.models.smollm2 import converted_smollm2
    from ftis_swarm.models.tiny import qwen_tokenizer_dir

    return {"qwen": AutoTokenizer.from_pretrained(str(qwen_tokenizer_dir())),
            "smollm2": AutoTokenizer.from_pretrained(str(converted_smollm2()))}


def _side(tok, text: str, stop: bool) -> tuple[list[int], list[int]]:
    ids = tok(text, add_special_tokens=False)["input_ids"] + ([tok.eos_token_id] if stop else [])
    return ids, [len(b) for b in token_bytes(tok, ids, stop_ids=[tok.eos_token_id])]


@pytest.mark.parametrize("peer_name,learner_name", [("qwen", "smollm2"), ("smollm2", "qwen")])
@pytest.mark.parametrize("stop", [True, False])
def test_real_tokenizers_chunk_ratios_multiply_to_the_sequence_ratio(tokenizers, peer_name, learner_name, stop):
    gen = torch.Generator().manual_seed(7)
    for text in TEXTS:
        if not text and not stop:
            continue
        raw = text.encode()
        p_ids, p_bytes = _side(tokenizers[peer_name], text, stop)
        l_ids, l_bytes = _side(tokenizers[learner_name], text, stop)
        assert check_alignment(raw, p_bytes) == text
        c = align_chunks(raw, p_bytes, l_bytes)
        lp = -torch.rand(len(l_ids), generator=gen, dtype=torch.float32) * 5  # (L_learner,)
        lg = -torch.rand(len(p_ids), generator=gen, dtype=torch.float32) * 5  # (L_peer,)
        xk = chunk_log_ratios(lp, lg, c)
        seq = float(lp.double().sum() - lg.double().sum())
        assert math.exp(float(xk.sum())) == pytest.approx(math.exp(seq), rel=1e-5)
        assert abs(float(xk.sum()) - seq) < 1e-5
        # every boundary is a token end on both sides and falls between characters
        ends_p = {sum(p_bytes[: j + 1]) for j in range(len(p_bytes)) if j + 1 == len(p_bytes) or c.peer[j] != c.peer[j + 1]}
        ends_l = {sum(l_bytes[: j + 1]) for j in range(len(l_bytes)) if j + 1 == len(l_bytes) or c.learner[j] != c.learner[j + 1]}
        assert ends_p == ends_l
        assert all(b == len(raw) or (raw[b] & 0xC0) != 0x80 for b in ends_p)
        assert list(c.peer) == sorted(c.peer) and list(c.learner) == sorted(c.learner)
        if stop:  # the stops make the last chunk, alone
            assert c.peer.count(c.n - 1) == 1 and c.learner.count(c.n - 1) == 1
        # the mapping the loss reads: per learner token, chunk sums on each chunk's last token
        mapped = chunk_gen_logp(lg, c)
        assert float(mapped.double().sum()) == pytest.approx(float(lg.double().sum()), abs=1e-5)
        terms = sample_terms(lp[None], mapped[None], torch.tensor([1.0]), torch.ones(1, len(l_ids)),
                             torch.tensor([True]), FTISConfig(), chunks=torch.tensor([c.learner]))
        expect_x = xk.clamp(-20, 20)[list(c.learner)].float()
        assert torch.allclose(terms.x[0], expect_x, atol=1e-5)
        assert torch.allclose(terms.w[0], torch.exp(expect_x).clamp(max=2.0), atol=1e-5)
        r = torch.exp(xk.clamp(-20, 20))
        assert float(terms.kl[0]) == pytest.approx(float((r * xk - r + 1).clamp(min=0).sum()), rel=1e-4, abs=1e-5)


def test_digits_and_spaces_chunk_finely_on_this_pair(tokenizers):
    """Both tokenizers split digits one by one, so an arithmetic answer aligns token for token."""
    text = " 12345 + 678 = 13023"
    _, pb = _side(tokenizers["qwen"], text, True)
    _, lb = _side(tokenizers["smollm2"], text, True)
    c = align_chunks(text.encode(), pb, lb)
    assert chunk_sizes(c) == [1] * c.n


def _batch():
    g = torch.Generator().manual_seed(3)
    old = -torch.rand(3, 5, generator=g) * 3
    gen = -torch.rand(3, 5, generator=g) * 3
    mask = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1], [1, 1, 0, 0, 0]], dtype=torch.float32)
    return old, gen, mask, torch.tensor([1.0, -0.5, 0.3]), torch.tensor([True, True, False])


@pytest.mark.parametrize("mode", ["ftis", "tis", "vis", "nois"])
def test_unchunked_rows_are_bit_for_bit_unchanged(mode):
    old, gen, mask, adv, off = _batch()
    cfg = FTISConfig(mode=mode)
    unproven = torch.tensor([True, False, False])
    base = sample_terms(old, gen, adv, mask, off, cfg, unproven=unproven)
    none = sample_terms(old, gen, adv, mask, off, cfg, unproven=unproven, chunks=torch.full((3, 5), -1))
    chunks = torch.tensor([[-1] * 5, [0, 0, 1, 2, 2], [-1] * 5])
    mixed = sample_terms(old, gen, adv, mask, off, cfg, unproven=unproven, chunks=chunks)
    for f in base.__dataclass_fields__:
        assert torch.equal(getattr(base, f), getattr(none, f)), f
        assert torch.equal(getattr(base, f)[[0, 2]], getattr(mixed, f)[[0, 2]]), f
    # the chunked row: chunk 0 = tokens 0-1, chunk 1 = token 2, chunk 2 = tokens 3-4
    d = (old[1] - gen[1]).double()
    xk = torch.stack([d[:2].sum(), d[2:3].sum(), d[3:].sum()]).float()
    assert torch.allclose(mixed.x[1], xk[[0, 0, 1, 2, 2]], atol=1e-6)


def test_unproven_cap_applies_to_chunk_weights():
    old = torch.tensor([[-0.1, -0.1]])
    gen = torch.tensor([[0.0, -3.0]])  # one chunk: x = -0.2 + 3.0 = 2.8, exp > C
    args = (old, gen, torch.tensor([1.0]), torch.ones(1, 2), torch.tensor([True]), FTISConfig())
    free = sample_terms(*args, chunks=torch.tensor([[0, 0]]))
    assert torch.allclose(free.w, torch.tensor([[2.0, 2.0]]))
    capped = sample_terms(*args, chunks=torch.tensor([[0, 0]]), unproven=torch.tensor([True]))
    assert torch.equal(capped.w, torch.tensor([[1.0, 1.0]])) and bool(capped.capped.all())


def test_refusals_carry_their_reason():
    with pytest.raises(AlignmentError) as e:
        check_alignment(b"abc", [1, 1])
    assert e.value.reason == "align_bytes"
    with pytest.raises(AlignmentError) as e:
        check_alignment(b"abc", [1, 0, 2])  # a 0-byte token before the last
    assert e.value.reason == "align_bytes"
    with pytest.raises(AlignmentError) as e:
        check_alignment(b"a\xff\xfe", [1, 2])
    assert e.value.reason == "align_utf8"
    with pytest.raises(AlignmentError) as e:
        check_alignment("é".encode()[:1], [1])  # a truncated character
    assert e.value.reason == "align_utf8"
    with pytest.raises(AlignmentError) as e:
        check_reencoding(513, 512)
    assert e.value.reason == "align_too_long"
    check_reencoding(512, 512)
    assert check_alignment("é!".encode(), [1, 1, 1, 0]) == "é!"
