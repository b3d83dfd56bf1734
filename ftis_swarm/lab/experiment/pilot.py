"""The experiment's pilot gate: is a candidate learner B far enough from A for the correction to matter?

The experiment can only show an effect of the F-TIS correction when the peer's
samples are really off-policy for the learner, and only show learning when both learners
solve some items but not all. Before any arm runs, the pilot measures, on every held-out
item of the task (each distinct question once):

- A's and each candidate B's greedy pass@1 and sampled accuracy (`samples` completions an
  item at temperature `T`), per item (`lab/experiment/heldout.py`);
- B's samples weighed under A as A's learner weighs a peer's (`Learner.old_logprobs` for
  `logp_old`, `core.sample_terms` and `core.ftis_metrics` in `ftis` mode): docs/method.md's
  `ess` and the share of tokens whose weight `exp(x)` is over C (`frac_truncated`), plus the
  mean weight, the KL and whether the forgery detector would flag B (it must not: B is an
  honest, divergent peer); and the same for A's samples under B.

The gate (`Gate`, fixed before the run, on greedy pass@1, the experiment's statistic): A
starts between 0.25 and 0.7; B is at least 0.15 below A and at least 0.1; B's samples
under A have `ess` at most 0.6 with at least 5% of tokens over C. A's samples under B are
reported beside, not gated. The chosen B is the candidate that passes (the one with the
highest greedy accuracy when several do), else, among those that solve at least `b_min`
(a B that solves nothing gives no signal), the one that passes the most checks (ties: lower
ESS, then higher accuracy), and the result says it did not pass, so the experiment marks
its correction claims "not tested".
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Optional, Sequence

from ftis_swarm.config import FTISConfig, LearnerConfig
from ftis_swarm.core.ftis import ftis_metrics, sample_terms
from ftis_swarm.lab.experiment.heldout import HeldoutResult, evaluate_heldout
from ftis_swarm.learner.batch import ScoredGroup, build_batch
from ftis_swarm.learner.forgery import screen_batch
from ftis_swarm.learner.learner import Learner
from ftis_swarm.tasks import Task, TaskItem, get_task

log = logging.getLogger(__name__)

CANDIDATES = ("smollm2-slim", "smollm2-slim27", "smollm2-slim26")
"""B candidates by default: SmolLM2 without layers 26-27, 25-27 and 24-27 (models/smollm2.py)."""


@dataclass(frozen=True)
class Gate:
    """The pilot's thresholds, fixed before the run."""

    a_min: float = 0.25
    a_max: float = 0.7
    b_gap: float = 0.15
    b_min: float = 0.1
    ess_max: float = 0.6
    over_c_min: float = 0.05

    def checks(self, a_acc: float, b_acc: float, ess: float, over_c: float) -> dict[str, bool]:
        """Each condition of the gate, by name (all True: the candidate passes)."""
        return {
            "a_in_range": self.a_min <= a_acc <= self.a_max,
            "b_below_a": b_acc <= a_acc - self.b_gap + 1e-9,
            "b_at_least_min": b_acc >= self.b_min - 1e-9,
            "ess_low": ess <= self.ess_max + 1e-9,
            "over_c": over_c >= self.over_c_min - 1e-9,
        }


def choose(rows: Sequence[dict[str, Any]]) -> int:
    """Index of the chosen candidate among pilot rows (keys `checks`, `b`, `b_under_a`); see the module doc."""
    if not rows:
        raise ValueError("the pilot needs at least one candidate")

    def rank(i: int) -> tuple:
        r = rows[i]
        passed = sum(r["checks"].values())
        all_pass = passed == len(r["checks"])
        learns = r["checks"]["b_at_least_min"]  # a B that solves nothing gives its GRPO groups no signal
        return (all_pass, r["b"]["greedy_accuracy"] if all_pass else 0.0, learns, passed, -r["b_under_a"]["ess"],
                r["b"]["greedy_accuracy"])

    return max(range(len(rows)), key=rank)


def weigh(learner_model: Any, tokenizer: Any, task: Task, items: Sequence[TaskItem], peer: HeldoutResult,
          cfg: Optional[FTISConfig] = None) -> dict[str, float]:
    """docs/method.md's metrics of `peer`'s groups as a peer's samples in an update of `learner_model`.

    Rewards are the peer's own scores (recomputed by the task's verifier in `evaluate_heldout`);
    every sample is off-policy and filterable, as a peer's are. Nothing is trained.
    """
    cfg = cfg or FTISConfig(mode="ftis")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    scored = [ScoredGroup.vertical(g, rewards, offpolicy=True, source=1, filterable=True)
              for g, rewards in zip(peer.groups, peer.rewards)]
    batch = build_batch(scored, pad_id=int(pad), micro_batch=32)
    learner = Learner(learner_model, cfg=LearnerConfig(dtype="fp32", micro_batch=32, ftis=cfg), pad_id=int(pad))
    logp_old = learner.old_logprobs(batch)  # (N, T)
    terms = sample_terms(logp_old, batch.logp_gen, batch.advantages, batch.mask, batch.filterable, cfg)
    metrics = ftis_metrics(terms, batch.mask, batch.offpolicy, cfg)
    flagged, stats = screen_batch(learner.detector, batch, logp_old, C=cfg.C, skip=set())
    return {
        "ess": metrics["ess"],
        "frac_over_C": metrics["frac_truncated"],
        "mean_weight": metrics["mean_weight"],
        "kl_mean": metrics["kl_mean"],
        "kl_p95": metrics["kl_p95"],
        "frac_kl_over_g": metrics["frac_kl_over_g"],
        "frac_filtered": metrics["frac_filtered"],
        "forgery_mean": stats.get("forgery_mean@1", 0.0),
        "forgery_flagged": bool(flagged),
        "tokens": int(batch.mask.sum()),
    }


def run_pilot(candidates: Sequence[str] = CANDIDATES, *, model_a: str = "smollm2-135m", task_name: str = "arith_mix",
              samples: int = 16, temperature: float = 1.0, max_new_tokens: int = 24, seed: int = 0,
              gate: Gate = Gate(), progress: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """A, then each candidate B, on every held-out item of `task_name`; returns the table's rows and the choice."""
    from ftis_swarm.models import load_model

    t0 = time.perf_counter()
    task = get_task(task_name)
    n = task.size("test")
    if not n:
        raise ValueError(f"task {task_name} has no fixed held-out set (size of its test split unknown); "
                         "the pilot needs one, e.g. arith_mix")
    items = task.sample(n, seed=seed, split="test")
    settings = dict(samples=samples, temperature=temperature, max_new_tokens=max_new_tokens, seed=seed)
    progress(f"A ({model_a}): greedy and {samples} samples on {n} held-out items")
    model_a_, tok = load_model(model_a)
    eval_a = evaluate_heldout(model_a_, tok, task, items, sender="A", **settings)
    rows = []
    for name in candidates:
        progress(f"B candidate {name}")
        model_b, tok_b = load_model(name)
        eval_b = evaluate_heldout(model_b, tok_b, task, items, sender="B", **settings)
        b_under_a = weigh(model_a_, tok, task, items, eval_b)
        a_under_b = weigh(model_b, tok_b, task, items, eval_a)
        checks = gate.checks(eval_a.greedy_accuracy, eval_b.greedy_accuracy, b_under_a["ess"],
                             b_under_a["frac_over_C"])
        rows.append({"model": name, "layers": int(model_b.config.num_hidden_layers), "b": eval_b.to_dict(),
                     "b_under_a": b_under_a, "a_under_b": a_under_b, "checks": checks,
                     "passes": all(checks.values())})
        log.info("pilot %s: B greedy %.3f sampled %.3f, ess %.3f, over C %.3f, passes %s", name,
                 eval_b.greedy_accuracy, eval_b.sampled_accuracy, b_under_a["ess"], b_under_a["frac_over_C"],
                 rows[-1]["passes"])
        del model_b
    chosen = choose(rows)
    return {
        "task": task_name, "items": n, "settings": settings, "gate": asdict(gate),
        "a": {"model": model_a, "layers": int(model_a_.config.num_hidden_layers), **eval_a.to_dict()},
        "candidates": rows, "chosen": rows[chosen]["model"], "chosen_passes": rows[chosen]["passes"],
        "seconds": time.perf_counter() - t0,
    }


def pilot_table(result: dict[str, Any]) -> str:
    """The pilot's figures as a markdown table, one row for A and one per candidate."""
    a = result["a"]
    head = ("| model | layers | greedy | sampled | ESS B under A | over C | ESS A under B | over C | "
            "B flagged | gate |\n|---|---|---|---|---|---|---|---|---|---|\n")
    lines = [f"| A {a['model']} | {a['layers']} | {a['greedy_accuracy']:.3f} | {a['sampled_accuracy']:.3f} "
             "| - | - | - | - | - | - |"]
    for r in result["candidates"]:
        ba, ab = r["b_under_a"], r["a_under_b"]
        failed = [k for k, ok in r["checks"].items() if not ok]
        verdict = "pass" if r["passes"] else "fail: " + ", ".join(failed)
        lines.append(f"| B {r['model']} | {r['layers']} | {r['b']['greedy_accuracy']:.3f} | "
                     f"{r['b']['sampled_accuracy']:.3f} | {ba['ess']:.3f} | {ba['frac_over_C']:.3f} | "
                     f"{ab['ess']:.3f} | {ab['frac_over_C']:.3f} | {'yes' if ba['forgery_flagged'] else 'no'} | "
                     f"{verdict} |")
    chosen = f"\nChosen B: {result['chosen']} ({'passes' if result['chosen_passes'] else 'no candidate passes'})"
    return head + "\n".join(lines) + chosen + "\n"
