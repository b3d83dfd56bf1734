"""Groups sampled from a real (tiny) model, for learner and node tests."""

from __future__ import annotations

import time

import numpy as np
import torch

from ftis_swarm.config import LearnerConfig
from ftis_swarm.core.logprobs import token_logprobs
from ftis_swarm.learner.learner import apply_lora
from ftis_swarm.learner.sharding import base_dtype
from ftis_swarm.models import load_model
from ftis_swarm.wire import Group


@torch.no_grad()
def sample_group(model, prompt_ids, *, G: int = 4, length: int = 6, temperature: float = 1.0, seed: int = 0,
                 sender: str = "self", policy_version: int = 0, item_id: str = "arith/v1/s0/0",
                 vocab_limit: int | None = None, tokenizer_fp: str = "f" * 32) -> Group:
    """G completions of `length` tokens sampled from softmax(z/T), with their exact log-probs.

    The log-probs are read from the very distribution each token was drawn from (the
    model's full `.logits`, no cache), not recomputed by `token_logprobs`, the function the
    learner runs: a test comparing the two compares independent computations.
    """
    gen = torch.Generator().manual_seed(seed)
    P = len(prompt_ids)
    ids = torch.tensor([list(prompt_ids)] * G)  # (G, P)
    lps = []
    for _ in range(length):
        logits = model(input_ids=ids).logits[:, -1].float() / temperature  # (G, V)
        if vocab_limit:
            logits[:, vocab_limit:] = -float("inf")
        logp = torch.log_softmax(logits, -1)  # (G, V)
        nxt = torch.multinomial(logp.exp(), 1, generator=gen)  # (G, 1)
        lps.append(logp.gather(1, nxt))  # (G, 1)
        ids = torch.cat([ids, nxt], 1)
    lp = torch.cat(lps, 1)  # (G, length)
    return Group.build(
        run_id="test", sender=sender, model_id="tiny", policy_version=policy_version, created_at=time.time(),
        tokenizer_fp=tokenizer_fp, task_id="arith", item_id=item_id, prompt_ids=prompt_ids,
        temperature=temperature, completion_ids=[r[P:].numpy() for r in ids], logp_gen=[r.numpy() for r in lp],
    )


def params_snapshot(model) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def changed(before: dict[str, torch.Tensor], model) -> set[str]:
    return {n for n, p in model.named_parameters() if not torch.equal(before[n], p.detach())}


def shift_logp(group: Group, delta: float) -> Group:
    """The same completions with every generation log-prob moved by `delta` (clipped at 0)."""
    return rebuilt(group, logp_gen=[np.minimum(lp + delta, 0.0) for lp in group.logp_gen])


def rebuilt(group: Group, **changes) -> Group:
    """`group` with some fields changed (a new group, a new id)."""
    return Group.build(**{**_fields(group), **changes})


def _fields(g: Group) -> dict:
    return dict(run_id=g.run_id, sender=g.sender, model_id=g.model_id, policy_version=g.policy_version,
                created_at=g.created_at, tokenizer_fp=g.tokenizer_fp, task_id=g.task_id, item_id=g.item_id,
                prompt_ids=g.prompt_ids, temperature=g.temperature, completion_ids=g.completion_ids,
                logp_gen=g.logp_gen)


def build_learner_model(model_dir: str, cfg: LearnerConfig):
    """The model a learner trains: LoRA B matrices randomised (seeded) so A's gradient is not 0."""
    model, _ = load_model(model_dir, dtype=base_dtype(cfg))
    torch.manual_seed(0)
    model = apply_lora(model, cfg)
    if cfg.lora is not None:
        gen = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.copy_(torch.randn(p.shape, generator=gen) * 0.05)
    return model
