"""The pilot of the pre-registered design: which logit-bias scale sigma makes B far enough from A.

Learner B is `smollm2-bias<sigma>` (models/logit_bias.py): A plus a fixed random logit bias.
For each sigma of the sweep, on PROMPTS train prompts drawn with PILOT_SEED (a seed no run
uses: the runs' are 0..15), B samples a group of G completions per prompt with the run's
sampling settings (temperature, max_new_tokens), and the project's own functions weigh them
as A's learner weighs a peer's (`pilot.weigh`: `Learner.old_logprobs`, `core.sample_terms`,
`core.ftis_metrics`):

- `ess`: docs/method.md's ESS of B's samples under A with the truncated weight min(exp(x), C);
- `frac_over_C`: the share of B's tokens whose weight exp(x) is over C;
- `ess_untruncated`: the same ESS with exp(x) itself (what F-VIS learns with);
- `reward`: B's mean reward over its samples (the task's verifier);
- `mixed`: the share of B's groups whose rewards are not all equal (a GRPO signal).

The choice rule, written before the sweep runs (`choose_sigma`): among the sigmas whose
reward is at least REWARD_MIN, the one with the highest ESS that is at most TARGET_ESS (the
mildest bias reaching the target); if none reaches it, the one with the lowest ESS among
those, and the result says so (`target_reached` False); if no sigma has reward REWARD_MIN,
none is chosen. The gate (`SigmaGate`) is then checked on the chosen row: ESS at most 0.6, at
least 5% of tokens over C, reward at least 0.1, at least 30% of groups mixed. The second step
of the pilot, A's learning rate (the one at which NoIS hurts most, if any), runs real arms and
is a documented command (docs/experiment.md), not this sweep.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Optional, Sequence

from ftis_swarm.config import FTISConfig
from ftis_swarm.lab.experiment.heldout import HeldoutResult, sample_groups, sampled_rewards
from ftis_swarm.lab.experiment.pilot import weigh
from ftis_swarm.models.logit_bias import bias_name
from ftis_swarm.tasks import get_task

log = logging.getLogger(__name__)

SIGMAS = (1.0, 1.5, 2.0, 2.5, 3.0)
PILOT_SEED = 1000
"""Seed of the pilot's prompts and sampling: no run of the experiment uses it (theirs are 0..15)."""
PROMPTS = 24
TARGET_ESS = 0.4
REWARD_MIN = 0.1


@dataclass(frozen=True)
class SigmaGate:
    """The gate on the chosen sigma, fixed before the sweep (issue 29)."""

    ess_max: float = 0.6
    over_c_min: float = 0.05
    reward_min: float = REWARD_MIN
    mixed_min: float = 0.3

    def checks(self, row: dict[str, Any]) -> dict[str, bool]:
        """Each condition by name (all True: the sigma passes)."""
        return {"ess_low": row["ess"] <= self.ess_max + 1e-9, "over_c": row["frac_over_C"] >= self.over_c_min - 1e-9,
                "reward": row["reward"] >= self.reward_min - 1e-9, "mixed": row["mixed"] >= self.mixed_min - 1e-9}


def choose_sigma(rows: Sequence[dict[str, Any]]) -> tuple[Optional[int], bool]:
    """`(index of the chosen row or None, whether it reached TARGET_ESS)` by the module doc's rule."""
    eligible = [i for i, r in enumerate(rows) if r["reward"] >= REWARD_MIN - 1e-9]
    if not eligible:
        return None, False
    reaching = [i for i in eligible if rows[i]["ess"] <= TARGET_ESS + 1e-9]
    if reaching:
        return max(reaching, key=lambda i: rows[i]["ess"]), True
    return min(eligible, key=lambda i: rows[i]["ess"]), False


def measure(model_a: Any, tok: Any, model_b: Any, task_name: str, *, prompts: int, group_size: int,
            temperature: float, max_new_tokens: int, seed: int, C: float) -> dict[str, Any]:
    """One sigma's row: B's groups on the pilot's train prompts, weighed under A (module doc)."""
    task = get_task(task_name)
    items = task.sample(prompts, seed=seed, split="train")
    groups = sample_groups(model_b, tok, task, items, samples=group_size, temperature=temperature,
                           max_new_tokens=max_new_tokens, seed=seed, sender="B")
    rewards = sampled_rewards(tok, task, items, groups)
    peer = HeldoutResult(item_ids=[it.item_id for it in items], greedy=[], rewards=rewards, samples=group_size,
                         temperature=temperature, groups=groups)
    truncated = weigh(model_a, tok, task, items, peer, FTISConfig(mode="ftis", C=C))
    untruncated = weigh(model_a, tok, task, items, peer, FTISConfig(mode="vis", C=C))
    flat = [x for r in rewards for x in r]
    return {"ess": truncated["ess"], "frac_over_C": truncated["frac_over_C"], "ess_untruncated": untruncated["ess"],
            "mean_weight": truncated["mean_weight"], "kl_mean": truncated["kl_mean"],
            "forgery_flagged": truncated["forgery_flagged"], "reward": sum(flat) / len(flat) if flat else 0.0,
            "mixed": sum(len(set(r)) > 1 for r in rewards) / len(rewards) if rewards else 0.0,
            "tokens": truncated["tokens"]}


def run_sigma_pilot(sigmas: Sequence[float] = SIGMAS, *, model_a: str = "smollm2-135m", task_name: str = "arith_mix",
                    prompts: int = PROMPTS, group_size: int = 6, temperature: float = 0.7, max_new_tokens: int = 16,
                    seed: int = PILOT_SEED, C: float = 2.0, gate: SigmaGate = SigmaGate(),
                    progress: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """The sweep: one row per sigma, the choice by `choose_sigma`, the gate on it; JSON-ready."""
    from ftis_swarm.models import load_model

    t0 = time.perf_counter()
    a, tok = load_model(model_a)
    settings = dict(prompts=prompts, group_size=group_size, temperature=temperature, max_new_tokens=max_new_tokens,
                    seed=seed, C=C)
    rows = []
    for sigma in sigmas:
        name = bias_name(sigma)
        progress(f"sigma {sigma:g} ({name})")
        b, _ = load_model(name)
        row = {"sigma": sigma, "model": name, **measure(a, tok, b, task_name, **settings)}
        row["checks"] = gate.checks(row)
        row["passes"] = all(row["checks"].values())
        log.info("sigma %g: ess %.3f, over C %.3f, reward %.3f, mixed %.2f", sigma, row["ess"], row["frac_over_C"],
                 row["reward"], row["mixed"])
        rows.append(row)
        del b
    chosen, reached = choose_sigma(rows)
    return {"task": task_name, "model_a": model_a, "settings": settings, "gate": asdict(gate),
            "rule": {"target_ess": TARGET_ESS, "reward_min": REWARD_MIN}, "candidates": rows,
            "chosen": rows[chosen]["model"] if chosen is not None else None,
            "chosen_sigma": rows[chosen]["sigma"] if chosen is not None else None,
            "target_reached": reached, "chosen_passes": bool(chosen is not None and rows[chosen]["passes"]),
            "seconds": time.perf_counter() - t0}


def sigma_table(result: dict[str, Any]) -> str:
    """The sweep as a markdown table and the choice, in words."""
    lines = ["| sigma | model | ESS (min(exp x, C)) | tokens over C | ESS untruncated | B's reward | groups mixed | "
             "gate |", "|---|---|---|---|---|---|---|---|"]
    for r in result["candidates"]:
        failed = [k for k, ok in r["checks"].items() if not ok]
        lines.append(f"| {r['sigma']:g} | {r['model']} | {r['ess']:.3f} | {r['frac_over_C']:.3f} | "
                     f"{r['ess_untruncated']:.3f} | {r['reward']:.3f} | {r['mixed']:.2f} | "
                     f"{'pass' if r['passes'] else 'fail: ' + ', '.join(failed)} |")
    if result["chosen"] is None:
        choice = f"No sigma has B's reward at least {REWARD_MIN}: none is chosen."
    elif result["target_reached"]:
        choice = (f"Chosen: sigma {result['chosen_sigma']:g} ({result['chosen']}), the mildest bias with ESS at most "
                  f"{TARGET_ESS} and reward at least {REWARD_MIN}")
    else:
        choice = (f"Chosen: sigma {result['chosen_sigma']:g} ({result['chosen']}): no sigma reached ESS {TARGET_ESS} "
                  f"with reward at least {REWARD_MIN}, so the lowest ESS with that reward")
    if result["chosen"] is not None:
        choice += "; the gate " + ("passes." if result["chosen_passes"] else "fails.")
    return "\n".join(lines) + "\n\n" + choice + "\n"
