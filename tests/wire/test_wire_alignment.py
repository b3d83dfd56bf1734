"""Wire v2's alignment data (`fam`, `txt`, `tb`: docs/method.md, "Peers with another tokenizer"): a group
of the real Qwen tokenizer round-trips with its texts and token byte lengths; hostile alignment data is
refused with a reason; the byte cost per token is measured."""

from __future__ import annotations

import dataclasses

import msgpack
import numpy as np
import pytest

from ftis_swarm.core.chunks import align_chunks, check_alignment
from ftis_swarm.wire import Group, WireError, decode_group, encode_group
from ftis_swarm.wire.fingerprint import token_bytes, tokenizer_fingerprint

COMPLETIONS = [" 12345 + 678 = 13023", "  héllo 🙂\n\n日本語 ", "The answer is -1.5."]


@pytest.fixture(scope="module")
def qwen():
    from transformers import AutoTokenizer

    from ftis_swarm.models.tiny import qwen_tokenizer_dir

    return AutoTokenizer.from_pretrained(str(qwen_tokenizer_dir()))


def aligned_group(tok, completions=COMPLETIONS, *, family="qwen", stop=True) -> Group:
    ids = [tok(c, add_special_tokens=False)["input_ids"] + ([tok.eos_token_id] if stop else []) for c in completions]
    pieces = [token_bytes(tok, i, stop_ids=[tok.eos_token_id]) for i in ids]
    rng = np.random.default_rng(0)
    return Group.build(
        run_id="run", sender="peer-q", model_id="tiny-qwen", policy_version=3, created_at=1.0,
        tokenizer_fp=tokenizer_fingerprint(tok), task_id="arith", item_id="7",
        prompt_ids=tok("What is 1+1?", add_special_tokens=False)["input_ids"], temperature=1.0,
        completion_ids=ids, logp_gen=[-rng.random(len(i)) for i in ids],
        tokenizer_family=family, texts=[b"".join(p) for p in pieces], token_bytes=[[len(b) for b in p] for p in pieces],
    )


def test_aligned_group_round_trips_and_aligns(qwen):
    g = aligned_group(qwen)
    back = decode_group(encode_group(g))
    assert back.aligned and back.tokenizer_family == "qwen" and back.group_id == g.group_id
    assert [t.decode() for t in back.texts] == COMPLETIONS
    for ids, tb, text in zip(back.completion_ids, back.token_bytes, back.texts):
        assert tb.shape == ids.shape and tb[-1] == 0 and int(tb.sum()) == len(text)
        assert check_alignment(text, tb.tolist()) == text.decode()
        align_chunks(text, tb.tolist(), tb.tolist())  # aligns with itself: one chunk per token
    plain = Group.build(**{k: getattr(g, k) for k in ("run_id", "sender", "model_id", "policy_version", "created_at",
                                                      "tokenizer_fp", "task_id", "item_id", "prompt_ids", "temperature",
                                                      "completion_ids", "logp_gen")})
    dplain = decode_group(encode_group(plain))
    assert not dplain.aligned and dplain.texts == () and dplain.token_bytes == ()


def test_vocabulary_bound_skipped_only_for_another_tokenizers_group(qwen):
    data = encode_group(aligned_group(qwen))
    small = 49152  # SmolLM2's vocabulary: Qwen's ids run past it
    with pytest.raises(WireError, match="outside the vocabulary"):
        decode_group(data, vocab_size=small)
    with pytest.raises(WireError, match="outside the vocabulary"):  # same fingerprint: ids are embedded, bounded
        decode_group(data, vocab_size=small, tokenizer_fp=tokenizer_fingerprint(qwen))
    assert decode_group(data, vocab_size=small, tokenizer_fp="another-tokenizer").aligned
    # without alignment data too: the swarm then refuses it as another tokenizer's (no one's fault), not malformed
    plain = dataclasses.replace(aligned_group(qwen), tokenizer_family="", texts=(), token_bytes=())
    plain._id.clear()
    assert not decode_group(encode_group(plain), vocab_size=small, tokenizer_fp="another-tokenizer").aligned


def _tamper(group: Group, **change) -> bytes:
    rec = msgpack.unpackb(encode_group(group), raw=False)
    rec.update(change)
    return msgpack.packb(rec, use_bin_type=True)


@pytest.mark.parametrize("change, message", [
    (lambda r: {"tb": r["tb"][:-1]}, "token byte lengths for"),
    (lambda r: {"tb": bytes([r["tb"][0] + 1]) + r["tb"][1:]}, "sum to"),
    (lambda r: {"txt": r["txt"] + b"x"}, "sum to"),
    (lambda r: {"tb": b"\x00" + bytes([r["tb"][1] + r["tb"][0]]) + r["tb"][2:]}, "no bytes"),
    (lambda r: {"txt": b"\xff" + r["txt"][1:]}, "not valid UTF-8"),
    (lambda r: {"fam": ""}, "without a tokenizer family"),
    (lambda r: {"fam": "x" * 65}, "'fam'"),
    (lambda r: {"txt": "text"}, "binary fields"),
])
def test_hostile_alignment_data_refused(qwen, change, message):
    g = aligned_group(qwen)
    rec = msgpack.unpackb(encode_group(g), raw=False)
    with pytest.raises(WireError, match=message):
        decode_group(_tamper(g, **change(rec)))


def test_encoder_refuses_inconsistent_alignment(qwen):
    g = aligned_group(qwen)
    with pytest.raises(WireError, match="summing to its text"):
        encode_group(Group(**{**{k: getattr(g, k) for k in g.__dataclass_fields__ if k != "_id"},
                              "texts": (g.texts[0] + b"!",) + g.texts[1:]}))
    with pytest.raises(WireError, match="0 to 255"):
        Group.build(**{**{k: getattr(g, k) for k in ("run_id", "sender", "model_id", "policy_version", "created_at",
                                                     "tokenizer_fp", "task_id", "item_id", "prompt_ids", "temperature",
                                                     "completion_ids", "logp_gen", "tokenizer_family", "texts")},
                       "token_bytes": [[256] + [0] * (len(c) - 1) for c in g.completion_ids]})


def alignment_cost(tok, completions: list[str]) -> tuple[float, float]:
    """Bytes per completion token of a group without and with alignment data (the same completions)."""
    with_data = aligned_group(tok, completions)
    plain = Group(**{**{k: getattr(with_data, k) for k in with_data.__dataclass_fields__ if k != "_id"},
                     "tokenizer_family": "", "texts": (), "token_bytes": ()})
    n = with_data.num_completion_tokens
    return len(encode_group(plain)) / n, len(encode_group(with_data)) / n


def test_alignment_costs_text_plus_one_byte_per_token(qwen, capsys):
    text = ("Let me compute 347 * 12 step by step. 347 * 10 = 3470 and 347 * 2 = 694, "
            "so the total is 3470 + 694 = 4164.\n#### 4164")
    plain, aligned = alignment_cost(qwen, [text] * 12)
    group = aligned_group(qwen, [text] * 12)
    text_per_token = sum(len(t) for t in group.texts) / group.num_completion_tokens
    # the extra is the text plus 1 byte (tb) a token and the family's few bytes
    assert aligned - plain == pytest.approx(text_per_token + 1.0, abs=0.05)
    with capsys.disabled():
        print(f"\nwire bytes per completion token (G=12, arithmetic text, Qwen): {plain:.3f} plain, "
              f"{aligned:.3f} with alignment data (+{aligned - plain:.3f}: text {text_per_token:.3f} + tb 1)")


def test_an_id_past_the_tokenizer_has_no_bytes_and_its_group_goes_without_alignment(qwen):
    from ftis_swarm.rollout.base import Aligner, Completion

    past = len(qwen) + 3  # a padded embedding row: a tiny model can sample it, the tokenizer has no piece for it
    with pytest.raises(ValueError, match="not in the tokenizer's vocabulary"):
        token_bytes(qwen, [qwen.encode("4")[0], past])
    aligner = Aligner(tokenizer=qwen, family="qwen2", stop_ids=frozenset())
    ok = Completion(token_ids=qwen.encode("4"), logprobs=[-0.1])
    assert aligner.fields([ok])["texts"] == [b"4"]
    assert aligner.fields([ok, dataclasses.replace(ok, token_ids=[past], logprobs=[-0.2])]) == {}
