"""How often honest peers publish groups of the same content (`peers/copies.py`) by chance.

The testnet's `tiny` line-up (a small and a large tiny Qwen2, the large one served by two nodes,
as `ops/testnet.py` builds them) samples groups for the same `arith` items, every node from its
own seed, and the groups of different nodes on one item are compared by content key. That is
the worst case for coincidences: in a run, nodes draw their items apart. Run:
`.venv/bin/python -m ftis_swarm.lab.bench.copies [items] [max_new_tokens ...]`; docs/method.md
("Known tricks") records what it printed.
"""

from __future__ import annotations

import sys
import tempfile
from collections import Counter
from itertools import combinations
from pathlib import Path

from ftis_swarm.config import SamplingConfig
from ftis_swarm.models.tiny import build_tiny_qwen2
from ftis_swarm.peers.copies import content_key, logp_key
from ftis_swarm.rollout.base import GroupHeader, PromptRequest
from ftis_swarm.rollout.hf_backend import TransformersBackend
from ftis_swarm.tasks import get_task


def same_content_rate(items: int, max_new_tokens: int, *, group_size: int = 8, workdir: Path) -> Counter:
    """Pairs of groups by different nodes on one item (`pairs`), those with one content key (`same`) and
    of those, the ones with equal log-prob keys too (`same_logp`, which the node counts `copied_group`)."""
    small = build_tiny_qwen2(workdir / "tiny-a", hidden_size=32, num_layers=1, seed=1)
    large = build_tiny_qwen2(workdir / "tiny-b", hidden_size=64, num_layers=2, seed=2)
    task = get_task("arith")
    sampling = SamplingConfig(max_new_tokens=max_new_tokens, group_size=group_size)
    by_node = []
    for k, path in enumerate((small, large, large)):
        backend = TransformersBackend.from_pretrained(str(path), header=GroupHeader("r", f"node-{k}", "m"))
        backend.restore_generate_calls(1000 * k)  # each node its own seeds
        prompts = [PromptRequest(it.task_id, it.item_id, task.render_prompt(backend.tokenizer, it))
                   for it in task.sample(items, seed=0)]
        by_node.append(backend.generate(prompts, group_size, sampling.model_copy(update={"seed": 7})))
    out: Counter = Counter()
    for a, b in combinations(by_node, 2):
        for ga, gb in zip(a, b):
            out["pairs"] += 1
            if content_key(ga) == content_key(gb):
                out["same"] += 1
                out["same_logp"] += logp_key(ga) == logp_key(gb)
    return out


def main(argv: list[str]) -> None:
    items = int(argv[0]) if argv else 200
    caps = [int(x) for x in argv[1:]] or [64, 2, 1]
    with tempfile.TemporaryDirectory() as tmp:
        for cap in caps:
            c = same_content_rate(items, cap, workdir=Path(tmp) / f"cap{cap}")
            print(f"max_new_tokens {cap:3d}: {c['same']} of {c['pairs']} pairs of groups on one item have one "
                  f"content key ({c['same'] / max(c['pairs'], 1):.4f}), {c['same_logp']} with equal log-probs too", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
