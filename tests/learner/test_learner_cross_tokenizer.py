"""A learner with another tokenizer than its peer's (docs/method.md, "Peers with another tokenizer"): the
publisher's alignment data, the refusals a receiver counts, and a SmolLM2-vocabulary learner training on a
Qwen-vocabulary peer's real groups through the node's scorer and the learner."""

from __future__ import annotations

import math

import msgpack
import numpy as np
import pytest
import torch

from ftis_swarm.config import LearnerConfig, SamplingConfig
from ftis_swarm.learner.batch import ScoredGroup
from ftis_swarm.learner.learner import Learner
from ftis_swarm.models import load_model
from ftis_swarm.node.scoring import Admission, TaskCache, score_groups
from ftis_swarm.peers import faults
from ftis_swarm.rollout import GroupHeader, PromptRequest
from ftis_swarm.rollout.base import Aligner, Completion
from ftis_swarm.rollout.hf_backend import TransformersBackend
from ftis_swarm.tasks import get_task
from ftis_swarm.wire import Group, WireError, decode_group, encode_group, tokenizer_fingerprint

PEER = "qwen-peer"
ITEM = get_task("arith").sample(1, seed=0, split="train")[0]


@pytest.fixture(scope="module")
def taught(tmp_path_factory):
    """The Qwen-vocabulary peer and the SmolLM2-vocabulary learner, both taught arith's answer form."""
    from ftis_swarm.ops.taught import build_tiny_arith_model, build_tiny_arith_smollm2

    work = tmp_path_factory.mktemp("cross")
    return build_tiny_arith_model(work / "tiny-arith"), build_tiny_arith_smollm2(work / "tiny-arith-smollm2")


@pytest.fixture(scope="module")
def tokenizers():
    from transformers import AutoTokenizer

    from ftis_swarm.models.smollm2 import converted_smollm2
    from ftis_swarm.models.tiny import qwen_tokenizer_dir

    return AutoTokenizer.from_pretrained(str(qwen_tokenizer_dir())), AutoTokenizer.from_pretrained(str(converted_smollm2()))


def _peer_group(qwen, texts, *, stop=True, item=ITEM.item_id, fam="qwen2", token_bytes=None, raw_texts=None) -> Group:
    """A Qwen-vocabulary group of arith item `item` whose completions are `texts`, as an honest publisher fills it."""
    eos = int(qwen.convert_tokens_to_ids("<|im_end|>"))
    comps = [Completion(qwen.encode(t, add_special_tokens=False) + ([eos] if stop else []), []) for t in texts]
    fields = Aligner(qwen, fam, frozenset({eos})).fields(comps)
    if token_bytes is not None:
        fields["token_bytes"] = token_bytes
    if raw_texts is not None:
        fields["texts"] = raw_texts
    return Group.build(run_id="r", sender=PEER, model_id="tiny-qwen", policy_version=0, created_at=0.0,
                       tokenizer_fp=tokenizer_fingerprint(qwen), task_id="arith", item_id=item, prompt_ids=[1, 2, 3],
                       temperature=1.0, completion_ids=[c.token_ids for c in comps],
                       logp_gen=[[-1.0] * len(c.token_ids) for c in comps], **fields)


def _admission(smol, limit=512):
    return Admission(tokenizer_fp=tokenizer_fingerprint(smol), align_limit=limit, align_eos=int(smol.eos_token_id))


def test_the_publisher_fills_texts_and_byte_lengths_an_honest_receiver_reads_back(tokenizers):
    qwen, smol = tokenizers
    g = _peer_group(qwen, ["12 + 3 = 15", "éclair 東京 🙂  x"])
    back = decode_group(encode_group(g), vocab_size=len(smol), tokenizer_fp=tokenizer_fingerprint(smol))
    assert back.aligned and back.tokenizer_family == "qwen2"
    assert [t.decode("utf-8") for t in back.texts] == ["12 + 3 = 15", "éclair 東京 🙂  x"]
    assert [int(b[-1]) for b in back.token_bytes] == [0, 0]  # the stop: 0 bytes
    # a completion cut inside a character cannot be described: the group goes without alignment data
    cut = qwen.encode("𓀀", add_special_tokens=False)  # one character, three byte-level tokens
    assert len(cut) > 1
    assert Aligner(qwen, "qwen2", frozenset()).fields([Completion(cut[:1], [0.0])]) == {}


def _repacked(group: Group, **fields) -> bytes:
    """`group`'s encoding with the given wire fields replaced (its signature would still cover it)."""
    rec = msgpack.unpackb(encode_group(group), raw=False)
    return msgpack.packb({**rec, **fields}, use_bin_type=True)


def test_hostile_groups_of_another_tokenizer_are_refused_with_a_counted_reason(tokenizers):
    qwen, smol = tokenizers
    tasks = TaskCache()
    fp = tokenizer_fingerprint(smol)
    honest = _peer_group(qwen, ["15", "14"])
    # on the wire: byte lengths that do not sum to the text, text that is not UTF-8: the decoder refuses the
    # signed body (the swarm counts it `malformed`, a signed fault)
    tb = b"".join(np.asarray(b, dtype=np.uint8).tobytes() for b in honest.token_bytes)
    for fields in ({"tb": bytes([tb[0] + 1]) + tb[1:]}, {"txt": b"\xff\xfe" + b"14"}):
        with pytest.raises(WireError):
            decode_group(_repacked(honest, **fields), vocab_size=len(smol), tokenizer_fp=fp)
    assert faults.cost_of("swarm_" + faults.BODY_MALFORMED) > 0
    # in process (no decoder between): the scorer's own checks, each reason counted and charged to the sender
    short = [np.asarray(b).copy() for b in honest.token_bytes]
    short[0][0] += 1
    cases = {
        faults.ALIGN_BYTES: (_peer_group(qwen, ["15", "14"], token_bytes=short), _admission(smol)),
        faults.ALIGN_UTF8: (_peer_group(qwen, ["15", "14"], raw_texts=[b"\xff\xfe", b"14"]), _admission(smol)),
        faults.ALIGN_TOO_LONG: (_peer_group(qwen, ["1" * 40, "14"]), _admission(smol, limit=8)),
        faults.TOKENIZER: (Group.build(**{k: getattr(honest, k) for k in (  # no alignment data
            "run_id", "sender", "model_id", "policy_version", "created_at", "tokenizer_fp", "task_id", "item_id",
            "prompt_ids", "temperature", "completion_ids", "logp_gen")}), _admission(smol)),
    }
    for reason, (group, admission) in cases.items():
        if reason in (faults.ALIGN_BYTES, faults.ALIGN_UTF8):
            group._id.append(f"hostile-{reason}")  # it has no encoding: the id a loopback would carry
        scored = score_groups([group], smol, tasks, admission=admission)
        assert scored.groups == [] and dict(scored.rejected) == {reason: 1}, reason
        assert scored.rejected_by_peer == {(PEER, reason): 1}
    # a learner that does not take other tokenizers (`learner.cross_tokenizer` false) refuses an honest one, free
    scored = score_groups([honest], smol, tasks, admission=Admission(tokenizer_fp=fp))
    assert dict(scored.rejected) == {faults.TOKENIZER: 1}
    # signed inconsistencies cost what a malformed group costs; a learner's limit costs nothing
    assert faults.cost_of(faults.ALIGN_BYTES) == faults.cost_of(faults.ALIGN_UTF8) == faults.cost_of(faults.GROUP_MALFORMED) > 0
    assert faults.cost_of(faults.ALIGN_TOO_LONG) == faults.cost_of(faults.TOKENIZER) == 0
    # and the honest group is admitted, scored from its text by this node's verifier
    ok = score_groups([honest], smol, tasks, admission=_admission(smol))
    assert ok.rejected == {} and ok.groups == [honest]
    assert ok.rewards[0].tolist() == [float(str(ITEM.answer) == t) for t in ("15", "14")]
    right = score_groups([_peer_group(qwen, [str(ITEM.answer), "14"])], smol, tasks, admission=_admission(smol))
    assert right.rewards[0].tolist() == [1.0, 0.0]


@pytest.mark.slow
def test_a_smollm2_learner_trains_on_a_qwen_peers_real_groups(taught):
    peer_dir, learner_dir = taught
    torch.manual_seed(0)
    peer_model, qwen = load_model(str(peer_dir), device="cpu")
    model, smol = load_model(str(learner_dir), device="cpu")
    assert len(qwen) != len(smol)
    fp = tokenizer_fingerprint(smol)
    backend = TransformersBackend(model=peer_model, tokenizer=qwen,
                                  header=GroupHeader("r", PEER, "tiny-qwen", alignment=True))
    learner = Learner(model, cfg=LearnerConfig(lr=1e-3), pad_id=int(smol.pad_token_id), tokenizer_fp=fp)
    before = [p.detach().clone() for p in model.parameters()]
    task, tasks = get_task("arith"), TaskCache()
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=12, group_size=8, seed=0)
    stepped, seen_one_token, seen_total = 0, 0, 0
    for r in range(3):
        items = task.sample(4, seed=100 + r, split="train")
        prompts = [PromptRequest(it.task_id, it.item_id, task.render_prompt(qwen, it)) for it in items]
        groups = [decode_group(encode_group(g), vocab_size=len(smol), tokenizer_fp=fp)
                  for g in backend.generate(prompts, 8, sampling)]
        assert all(g.aligned and g.tokenizer_fp != fp for g in groups)
        scored = score_groups(groups, smol, tasks, admission=_admission(smol))
        assert scored.rejected == {} and len(scored.groups) == 4
        batch = []
        for g, rewards in zip(scored.groups, scored.rewards):
            aligned = scored.aligned[g.group_id]
            one, total = aligned.one_token_chars()
            seen_one_token, seen_total = seen_one_token + one, seen_total + total
            assert aligned.prompt_ids.tolist() == task.render_prompt(smol, task.item(g.item_id))
            batch.append(ScoredGroup.vertical(g, rewards, offpolicy=True, filterable=True, source=1,
                                              ended=aligned.ended, aligned=aligned))
        m = learner.update(batch)
        assert math.isfinite(m["loss"]) and m["sequences"] == 32
        assert 0.0 < m["ess@1"] <= 1.0 and m["mean_weight@1"] > 0.0
        assert {"frac_truncated@1", "frac_filtered@1", "forgery_mean@1", "used@1"} <= set(m)
        assert learner.peer_report[PEER]["groups"] == 4
        stepped += m["sequences_with_gradient"] > 0
    assert stepped > 0
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert seen_total > 0 and seen_one_token == seen_total  # digits and EOS: every chunk is one learner token
