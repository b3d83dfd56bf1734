"""Groups for the wire tests: the committed example and random valid groups."""

from __future__ import annotations

import numpy as np

from ftis_swarm.wire import Group

EXAMPLE_PATH = "proto/examples/group_v2_example.msgpack"
V1_EXAMPLE_PATH = "proto/examples/group_v1_example.msgpack"
"""The v1 example, kept: a node of this release refuses it as another wire version."""


def example_group() -> Group:
    """The group in proto/examples/group_v2_example.msgpack, rebuilt from its definition."""
    rng = np.random.default_rng(20261129)
    return Group.build(
        run_id="example-run",
        sender="12D3KooWExamplePeerIdOfTheSenderNodeInBase58xxxxxxxx",
        model_id="HuggingFaceTB/SmolLM2-135M-Instruct",
        policy_version=7,
        created_at=1_796_000_000.25,
        tokenizer_fp="0123456789abcdef0123456789abcdef",
        task_id="arith",
        item_id="arith/v1/s0/42",
        prompt_ids=rng.integers(0, 49152, 24),
        temperature=0.7,
        completion_ids=[rng.integers(0, 49152, n) for n in (5, 9, 3, 7)],
        logp_gen=[-rng.exponential(1.0, n).astype(np.float32) for n in (5, 9, 3, 7)],
        task_digest="fedcba9876543210fedcba9876543210",
    )


def random_group(rng: np.random.Generator, *, G: int | None = None, length: int | None = None,
                 vocab: int = 151_669) -> Group:
    G = G or int(rng.integers(2, 9))
    lengths = [length or int(rng.integers(1, 40)) for _ in range(G)]
    return Group.build(
        run_id=f"run-{int(rng.integers(1000))}",
        sender="12D3KooW" + "".join(rng.choice(list("abcdefghijkmnopqrstuvwxyz123456789"), 44)),
        model_id="Qwen/Qwen2.5-1.5B-Instruct",
        policy_version=int(rng.integers(0, 10**6)),
        created_at=float(rng.uniform(1.7e9, 1.8e9)),
        tokenizer_fp="".join(rng.choice(list("0123456789abcdef"), 32)),
        task_id="gsm8k",
        item_id=f"gsm8k/train/{int(rng.integers(7473))}",
        prompt_ids=rng.integers(0, vocab, int(rng.integers(1, 300))),
        temperature=float(rng.uniform(0.1, 2.0)),
        completion_ids=[rng.integers(0, vocab, n) for n in lengths],
        logp_gen=[np.minimum(-rng.exponential(2.0, n), 0.0).astype(np.float32) for n in lengths],
    )


def groups_from(rng: np.random.Generator, sender_tag: str, n: int, length: int = 5) -> list[Group]:
    """`n` random groups of G = 2 completions of `length` tokens, sent by `sender_tag`."""
    out = []
    for _ in range(n):
        g = random_group(rng, G=2, length=length)
        out.append(type(g).build(**{**{f: getattr(g, f) for f in (
            "run_id", "model_id", "policy_version", "created_at", "tokenizer_fp", "task_id", "item_id",
            "prompt_ids", "temperature", "completion_ids", "logp_gen")}, "sender": sender_tag}))
    return out
