"""A SmolLM2-tokenizer learner on a Qwen-vocabulary peer's real groups (docs/method.md, "Peers with another
tokenizer"): the figures of the closing note, printed by `python -m ftis_swarm.lab.bench.cross_tokenizer`.

Both tiny models are taught arith's answer form (`tiny_arith.py`); the Qwen-vocabulary peer samples groups
with alignment data through the real rollout backend, the SmolLM2 node admits and scores them
(`node/scoring.py`, with its own template and verifier) and takes F-TIS updates on them
(`learner/learner.py`). Reported: the peer's per-sample ESS under the learner (`ess@<source>`), its
truncated and filtered shares, the share of completion characters in chunks of one learner token, and
the chunk-size distribution.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

PEER = "qwen-peer"


def run(workdir: Path, *, rounds: int = 2, prompts: int = 4, G: int = 8, seed: int = 0) -> dict[str, Any]:
    """`rounds` updates of the SmolLM2-vocabulary learner on the Qwen-vocabulary peer's groups; the figures."""
    import torch

    from ftis_swarm.config import LearnerConfig, SamplingConfig
    from ftis_swarm.learner.batch import ScoredGroup
    from ftis_swarm.learner.learner import Learner
    from ftis_swarm.models import load_model
    from ftis_swarm.node.scoring import Admission, TaskCache, score_groups
    from ftis_swarm.ops.taught import build_tiny_arith_model, build_tiny_arith_smollm2
    from ftis_swarm.rollout import GroupHeader, PromptRequest
    from ftis_swarm.rollout.hf_backend import TransformersBackend
    from ftis_swarm.tasks import get_task
    from ftis_swarm.wire import decode_group, encode_group, tokenizer_fingerprint

    torch.manual_seed(seed)
    peer_model, peer_tok = load_model(str(build_tiny_arith_model(workdir / "tiny-arith")), device="cpu")
    model, tok = load_model(str(build_tiny_arith_smollm2(workdir / "tiny-arith-smollm2")), device="cpu")
    fp = tokenizer_fingerprint(tok)
    backend = TransformersBackend(model=peer_model, tokenizer=peer_tok,
                                  header=GroupHeader("bench", PEER, "tiny-qwen", alignment=True))
    learner = Learner(model, cfg=LearnerConfig(lr=1e-4), pad_id=int(tok.pad_token_id or tok.eos_token_id),
                      tokenizer_fp=fp)
    task, tasks = get_task("arith"), TaskCache()
    admission = Admission(tokenizer_fp=fp, align_limit=512, align_eos=int(tok.eos_token_id))
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=16, group_size=G, seed=seed)
    sizes: Counter = Counter()
    chars = one_token_chars = wire_bytes = wire_tokens = 0
    updates, rejected = [], Counter()
    for r in range(rounds):
        items = task.sample(prompts, seed=seed * 1000 + r, split="train")
        requests = [PromptRequest(it.task_id, it.item_id, task.render_prompt(peer_tok, it)) for it in items]
        groups = []
        for g in backend.generate(requests, G, sampling):
            data = encode_group(g)
            wire_bytes += len(data)
            wire_tokens += sum(int(c.size) for c in g.completion_ids)
            groups.append(decode_group(data, vocab_size=len(tok), tokenizer_fp=fp))
        scored = score_groups(groups, tok, tasks, admission=admission)
        rejected.update(scored.rejected)
        batch = []
        for g, rewards in zip(scored.groups, scored.rewards):
            aligned = scored.aligned[g.group_id]
            for per_chunk in aligned.sizes:
                sizes.update(per_chunk)
            one, total = aligned.one_token_chars()
            one_token_chars, chars = one_token_chars + one, chars + total
            batch.append(ScoredGroup.vertical(g, rewards, offpolicy=True, filterable=True, source=1,
                                              ended=aligned.ended, aligned=aligned))
        if batch:
            m = learner.update(batch)
            updates.append({k: v for k, v in m.items() if k.endswith("@1") or k in (
                "loss", "sequences", "sequences_with_gradient", "frac_offpolicy_filtered", "ess", "frac_truncated")})
    return {"updates": updates, "rejected": dict(rejected), "chunk_sizes": dict(sorted(sizes.items())),
            "frac_chars_one_token_chunks": one_token_chars / chars if chars else 0.0,
            "wire_bytes_per_token": wire_bytes / wire_tokens if wire_tokens else 0.0}


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    workdir = Path(args[0] if args else "runs/bench-cross-tokenizer")
    print(json.dumps(run(workdir), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
