"""The attacks a hostile peer can make with validly signed groups, built from honest ones.

Each worked against a 3-node testnet before this project treated groups as untrusted;
`tests/swarm/test_swarm_poison.py` sends them to a real testnet and `ftis-node
bench attacks` (`lab/bench/attacks.py`) measures what reaches an update. Every attack starts
from a group an honest backend generated, so everything the attack does not change is
right: signature, tokenizer, run id, wire limits.

| attack | what the group claims | stopped by |
|---|---|---|
| `nan_temperature` | T = 1e-300: the receiver's log-probs are NaN | the wire decoder (T < 0.05) |
| `test_split` | an arith test item | the scorer: `not_train_split` |
| `eval_task` | a CHAMP item (evaluation only) | the scorer: `eval_task` |
| `out_of_range` | arith index 10^7, no node draws it | the scorer: `item_out_of_range` |
| `unknown_item` | an id whose content tag is another problem's | the scorer: `unknown_item` |
| `prompt_mismatch` | item A's id over item B's prompt | the scorer: `prompt_mismatch` |
| `forged_minus_3` | 16 one- or two-token completions, `logp_gen` 3 below the truth | the learner's forgery check |
| `flood` | 64 completions of 2,000 tokens (1 MiB) | the intake's token budget |
"""

from __future__ import annotations

import numpy as np

from ftis_swarm.config import SamplingConfig
from ftis_swarm.peers.intake import within_vocab
from ftis_swarm.rollout import PromptRequest
from ftis_swarm.tasks import get_task
from ftis_swarm.wire import Group

ATTACKS = ("nan_temperature", "test_split", "eval_task", "out_of_range", "unknown_item", "prompt_mismatch",
           "forged_minus_3", "flood")
FLOOD_G, FLOOD_TOKENS = 64, 2000
FORGERY_SHIFT = -3.0


def rebuilt(group: Group, **changes: object) -> Group:
    """`group` with some fields changed (a new group with a new id)."""
    fields = dict(run_id=group.run_id, sender=group.sender, model_id=group.model_id,
                  policy_version=group.policy_version, created_at=group.created_at,
                  tokenizer_fp=group.tokenizer_fp, task_id=group.task_id, item_id=group.item_id,
                  prompt_ids=group.prompt_ids, temperature=group.temperature,
                  completion_ids=group.completion_ids, logp_gen=group.logp_gen)
    return Group.build(**{**fields, **changes})


def prompts_for(items: list, tokenizer: object) -> list[PromptRequest]:
    """Rendered prompts of task items (each item's own task renders it)."""
    return [PromptRequest(task_id=it.task_id, item_id=it.item_id,
                          prompt_ids=list(get_task(it.task_id).render_prompt(tokenizer, it))) for it in items]


def attack_groups(backend: object, tokenizer: object, *, seed: int, token_bound: int,
                  temperature: float = 0.7, max_new_tokens: int = 8) -> dict[str, Group]:
    """One group per attack (`ATTACKS`), sent as the backend's sender; `seed` varies the items.

    `backend` is an honest rollout backend (`generate`); `token_bound` keeps the flood's ids
    inside the receiver's vocabulary, so that only its size is wrong.
    """
    arith = get_task("arith")
    pool = arith.sample(12, seed=seed)
    a = pool[0]
    b = next(it for it in pool if it.question != a.question)
    test_item = arith.sample(1, seed=seed, split="test")[0]
    champ = get_task("champ").sample(1, seed=seed, split="test")[0]
    short = SamplingConfig(temperature=temperature, max_new_tokens=2, group_size=16)
    normal = SamplingConfig(temperature=temperature, max_new_tokens=max_new_tokens, group_size=4)
    honest_a, honest_test = (_honest(backend, tokenizer, it, normal, token_bound) for it in (a, test_item))
    forged = _honest(backend, tokenizer, b, short, token_bound)
    rng = np.random.default_rng(seed)
    flood_ids = [rng.integers(0, token_bound, FLOOD_TOKENS) for _ in range(FLOOD_G)]
    return {
        "nan_temperature": rebuilt(honest_a, temperature=1e-300),
        "test_split": honest_test,
        "eval_task": rebuilt(honest_a, task_id="champ", item_id=champ.item_id,
                             prompt_ids=prompts_for([champ], tokenizer)[0].prompt_ids),
        "out_of_range": rebuilt(honest_a, item_id=f"arith/v1/s{seed}/{10**7}"),
        "unknown_item": rebuilt(honest_a, item_id=a.item_id.split(":")[0] + ":00000000"),
        "prompt_mismatch": rebuilt(honest_a, item_id=b.item_id),
        "forged_minus_3": rebuilt(forged, logp_gen=[lp + np.float32(FORGERY_SHIFT) for lp in forged.logp_gen]),
        "flood": rebuilt(honest_a, completion_ids=flood_ids,
                         logp_gen=[np.full(FLOOD_TOKENS, -1.0, dtype=np.float32)] * FLOOD_G),
    }


def _honest(backend: object, tokenizer: object, item: object, sampling: SamplingConfig, bound: int,
            tries: int = 50) -> Group:
    """A group an honest node would publish: sampled again while it holds an id past `bound`."""
    for _ in range(tries):
        [group] = backend.generate(prompts_for([item], tokenizer), sampling.group_size, sampling)
        if within_vocab(group, bound):
            return group
    raise RuntimeError(f"{tries} groups in a row held token ids past {bound}: is the model's vocabulary wrong?")
