"""`ftis-node testnet --qwen-peer`: one node more, on the Qwen vocabulary, and every node fetches other tokenizers'
groups (issue 45)."""

from __future__ import annotations

from ftis_swarm.cli.overrides import set_overrides
from ftis_swarm.config import NodeConfig, load_node_config
from ftis_swarm.models import load_model
from ftis_swarm.ops.testnet import OTHER_TOKENIZERS, node_command, preset
from ftis_swarm.tasks import get_task


def test_the_qwen_peer_is_a_taught_qwen_vocabulary_model_and_every_node_fetches_other_tokenizers(tmp_path):
    plain = preset("tiny", tmp_path)
    pre = preset("tiny", tmp_path, qwen_peer=True)
    assert plain.also == () and pre.specs == plain.specs and len(pre.also) == 1
    assert pre.flags[-2:] == OTHER_TOKENIZERS and OTHER_TOKENIZERS[-1] not in " ".join(plain.flags)
    qwen = pre.also[0]
    model, tok = load_model(qwen.model)
    assert len(tok) > 150_000  # the Qwen vocabulary, not the SmolLM2 one of the default preset's nodes
    item = get_task("arith").sample(1, seed=3, split="train")[0]
    cmd = node_command(qwen, index=3, run_dir=tmp_path / "q", peers=["/ip4/127.0.0.1/tcp/1"], run_id="r", rounds=1,
                       flags=pre.flags, extra=(), global_flags=())
    assert "swarm.fetch.other_tokenizers=true" in cmd and qwen.model in cmd
    # the flags every node is given are `join`'s: their `--set` keys load as a config
    sets = [pre.flags[i + 1] for i, flag in enumerate(pre.flags) if flag == "--set"]
    cfg = load_node_config(None, set_overrides(NodeConfig, sets), keep_none=True)
    assert cfg.swarm.fetch.other_tokenizers
    # taught: its greedy answer to an arith question is a number (a random tiny model writes no digit)
    import torch

    ids = torch.tensor([list(get_task("arith").render_prompt(tok, item))])
    out = model.generate(ids, max_new_tokens=4, do_sample=False)
    text = tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
    assert any(c.isdigit() for c in text), text
