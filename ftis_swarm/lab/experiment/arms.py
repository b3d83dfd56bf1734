"""The paper's experiment in miniature: two heterogeneous learners, alone and together, on CPU.

Two learners share one process per run (by default A is SmolLM2-135M and B
`smollm2-bias2`, SmolLM2 with a fixed logit bias, both fully fine-tuned; any two models with
one tokenizer work). Each run is one *arm* and one seed:

- `solo`: each learner trains on its own vertical groups only (plain on-policy GRPO; the
  loss mode does not matter, since own samples have weight 1 and are never filtered);
  `solo-2x` the same with twice the prompts a round: as many samples learned as a swarm arm;
- `vertical-<mode>`: each learner also trains on the other's groups, which cross through
  the real wire codec (`encode_group` -> bytes -> `decode_group`), as off-policy samples
  corrected by `<mode>` (`ftis_swarm.config.LOSS_MODES`); `vertical-<mode>-stale<k>` with
  each learner's own groups generated k versions ahead (`max_staleness` k);
- `horizontal-<mode>`: each group's G completions are split across the two models (G/2
  each, on a shared seeded prompt schedule), so every advantage is taken over a mixed
  group; the learner is called with `allow_mixed=True` (an experiment-only setting).

Each learner is a real node (`config.arm_config`: the `NodeConfig` of learner i in an arm under
seed s, with node seed `s + 1000000 i`; `run.start_node`: a `Node` on the in-process loopback
transport), trained by the node's own round, so `solo` is exactly a lone node. Every arm sees the same
prompt schedule for the same seed, the node's (`node.rollouts.round_items`): in `solo` and
`vertical` learner i draws its own P prompts of round r; in `horizontal` both learners take the union of those
2P prompts and generate G/2 completions each, so each learner samples P x G completions and
updates on 2P groups of G, as in `vertical`. Held-out accuracy is greedy pass@1 on a fixed
set of the task's test items, the same for every arm; it is measured once for the initial
weights (identical in every run: the same checkpoint, and a fresh LoRA adapter changes
nothing until its first step), then after the rounds in `eval_rounds` (by default the last) of each run.

Files: the package's `__init__.py` has the map (this file: the plan of a grid and the pool that runs it;
the settings are `config.py`'s).
"""

from __future__ import annotations

import json
import logging
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from functools import partial
from multiprocessing import get_context
from pathlib import Path
from typing import Any, Callable, Optional

from ftis_swarm.config import SwarmConfig
from ftis_swarm.lab.experiment.config import ExperimentConfig, with_node_eval_keys
from ftis_swarm.lab.experiment.run import run_arm, start_evaluation, warm_start

log = logging.getLogger(__name__)


def run_path(out: Path, arm: str, seed: int) -> Path:
    return out / "runs" / f"{arm}_seed{seed}.json"


def run_experiment(
    cfg: ExperimentConfig,
    out: Path,
    *,
    workers: int = 1,
    threads: int = 1,
    resume: bool = True,
    on_done: Optional[Callable[[str, dict[str, Any]], None]] = None,
) -> dict[str, Any]:
    """Runs the start evaluation and every (arm, seed), `workers` processes at a time.

    Each result is written to `out/runs/<arm>_seed<k>.json` as it finishes; with `resume`, a
    result already there from the same config is reused instead of rerun. `on_done(label,
    result)` is called in this process as each job finishes. Returns every result.
    """
    out.mkdir(parents=True, exist_ok=True)
    cfg_json = cfg.model_dump_json()
    (out / "config.json").write_text(json.dumps(json.loads(cfg_json), indent=2))
    key, defaults = run_key(cfg), run_key(ExperimentConfig())
    t0 = time.perf_counter()
    warm_dir = str(out / "warm") if cfg.warm is not None else None
    warm = None
    if warm_dir is not None:  # the specialist first: every run starts from it
        warm = _reuse(out / "warm.json", key, defaults) if resume else None
        if warm is None or not Path(warm_dir, cfg.warm.learner, "model").is_dir():
            before = warm  # its record, its checkpoint gone (another machine, a fresh checkout)

            def _warm_done(_: int, res: dict[str, Any]) -> None:
                nonlocal warm
                warm = res
                if before is not None:
                    set_aside_if_another_specialist(out, before, res)
                _write(out / "warm.json", res, key)
            _in_pool([(warm_start, (cfg_json, warm_dir))], workers=1, threads=max(1, workers * threads),
                     on_result=_warm_done)
        if on_done and warm is not None:
            on_done("warm", warm)
    jobs: list[tuple[str, Path, Callable[..., dict[str, Any]], tuple]] = [
        ("start", out / "start_eval.json", start_evaluation, (cfg_json, warm_dir)),
    ] + [(f"{arm} seed {seed}", run_path(out, arm, seed), partial(run_arm, warm_dir=warm_dir), (cfg_json, arm, seed))
         for seed in cfg.seeds for arm in cfg.arms]
    results: dict[str, dict[str, Any]] = {}
    todo = []
    for label, path, fn, args in jobs:
        done = _reuse(path, key, defaults) if resume else None
        if done is None:
            todo.append((label, path, fn, args))
            continue
        results[label] = done
        if on_done:
            on_done(f"{label} (reused)" if label != "start" else label, done)

    def finished(i: int, res: dict[str, Any]) -> None:
        label, path = todo[i][0], todo[i][1]
        _write(path, res, key)
        results[label] = res
        if on_done:
            on_done(label, res)

    _in_pool([(fn, args) for _, _, fn, args in todo], workers=workers, threads=threads, on_result=finished)
    return {
        "config": json.loads(cfg_json),
        **({"warm": warm} if warm is not None else {}),
        "start": results["start"],
        "runs": [results[label] for label, *_ in jobs[1:]],
        "wall_seconds": time.perf_counter() - t0,
    }


def _init_worker(threads: int) -> None:
    """A pool process: `threads` torch threads, no download progress bars on the console."""
    import torch
    from transformers.utils import logging as hf_logging

    torch.set_num_threads(threads)
    hf_logging.disable_progress_bar()


def _in_pool(calls: list[tuple[Callable[..., dict[str, Any]], tuple]], *, workers: int, threads: int,
             on_result: Callable[[int, dict[str, Any]], None]) -> None:
    """`fn(*args)` for each call, in spawned processes; `on_result(i, result)` here as each finishes.

    Calls are submitted in order, so the first (the start evaluation) starts first.
    """
    if not calls:
        return
    n = max(1, min(workers, len(calls)))
    # a fresh process per run: a process reused across runs kept growing (5.7 and 6.7 GB resident
    # after 13 runs of the default setting), and spawning costs seconds against minutes a run
    with ProcessPoolExecutor(max_workers=n, mp_context=get_context("spawn"), initializer=_init_worker,
                             initargs=(threads,), max_tasks_per_child=1) as pool:
        futures = {pool.submit(fn, *args): i for i, (fn, args) in enumerate(calls)}
        for fut in as_completed(futures):
            i = futures[fut]
            on_result(i, fut.result())


def run_key(cfg: ExperimentConfig) -> dict[str, Any]:
    """The settings one run depends on (all but the list of arms and seeds): what resume compares
    (`same_settings`: a setting added to the code since a run was saved matches at its default)."""
    return cfg.model_dump(mode="json", exclude={"arms", "seeds"})


def warm_trace(warm: dict[str, Any]) -> list[tuple[Any, Any]]:
    """What tells two warm starts apart: each round's reward and loss (equal only for the same specialist)."""
    return [(r.get("reward"), r.get("loss")) for r in warm.get("rounds", [])]


def set_aside_if_another_specialist(out: Path, before: dict[str, Any], now: dict[str, Any]) -> Optional[Path]:
    """Moves what started from the specialist of `before` (the finished runs, the start evaluation and its
    warm.json) into `out/set-aside-<n>/` when the warm start made again, `now`, is another one; returns that
    folder (None: the same specialist, nothing moved).

    A warm start is not bit-exact across machines (float sums in another order), and its checkpoint is not
    kept beside the results, so a resume elsewhere makes the specialist again: runs of two specialists must
    not be paired in one table. Nothing is deleted."""
    old, new = warm_trace(before), warm_trace(now)
    if old == new:
        return None
    differ = next((i for i, (a, b) in enumerate(zip(old, new)) if a != b), min(len(old), len(new)))
    n = 1
    while (out / f"set-aside-{n}").exists():
        n += 1
    dest = out / f"set-aside-{n}"
    dest.mkdir()
    for name in ("runs", "start_eval.json", "warm.json"):
        if (out / name).exists():
            (out / name).rename(dest / name)
    log.warning("the warm start made again differs from the one the finished runs started from (round %d: "
                "reward, loss %s against %s): those runs are in %s, and every run is made again",
                differ + 1, new[differ] if differ < len(new) else None, old[differ] if differ < len(old) else None,
                dest)
    return dest


def _write(path: Path, result: dict[str, Any], key: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"config": key, "result": result}))
    tmp.replace(path)


def same_settings(saved: Any, now: Any, default: Any) -> bool:
    """Whether a run saved with settings `saved` is one of `now`: equal, except that a setting the
    saved one lacks matches when `now` has its default there (a setting added to the code since,
    left as it was: the run it saved is the same run). A setting removed since, or changed, does not."""
    if isinstance(saved, dict) and isinstance(now, dict):
        if not saved.keys() <= now.keys():
            return False
        defaults = default if isinstance(default, dict) else {}
        return all(same_settings(saved[k], now[k], defaults.get(k)) if k in saved
                   else k in defaults and now[k] == defaults[k] for k in now)
    if isinstance(saved, list) and isinstance(now, list):
        defaults = default if isinstance(default, list) and len(default) == len(now) else [None] * len(now)
        return len(saved) == len(now) and all(same_settings(a, b, d) for a, b, d in zip(saved, now, defaults))
    return saved == now


def _reuse(path: Path, key: dict[str, Any], defaults: dict[str, Any]) -> Optional[dict[str, Any]]:
    if not path.is_file():
        return None
    saved = json.loads(path.read_text())
    config = saved.get("config")  # a run saved before the held-out keys moved into `node` has them at the top
    if isinstance(config, dict):
        config = _swarm_in_sections(with_node_eval_keys(config))
    if not same_settings(config, key, defaults):
        log.info("%s was made with another config; running it again", path)
        return None
    return saved["result"]


def _swarm_in_sections(key: dict[str, Any]) -> dict[str, Any]:
    """A saved run key whose node's swarm keys are flat (saved before `SwarmConfig` had sections) with them in
    their sections, as the code keeps them now (a setting it no longer has stays, and differs)."""
    node = key.get("node")
    swarm = node.get("swarm") if isinstance(node, dict) else None
    if not isinstance(swarm, dict):
        return key
    try:
        return {**key, "node": {**node, "swarm": SwarmConfig.sectioned(swarm, warn=False)}}
    except ValueError:  # an old key and its new one at odds: not this run
        return key


def pilot_gate(pilot: Optional[dict[str, Any]], model_b: str) -> dict[str, Any]:
    """Whether the pilot's gate passed for learner B's model: `{passed, reason, checks}`.

    The correction claims count as tested only when it did (and the run's ESS holds, which
    the statistics check); without a pilot, or a pilot of other candidates, it did not.
    """
    if pilot is None:
        return {"passed": False, "reason": "no pilot given (--pilot)", "checks": {}}
    rows = [c for c in pilot.get("candidates", []) if c.get("model") == model_b]
    if not rows:
        return {"passed": False, "reason": f"the pilot did not try {model_b}", "checks": {}}
    checks = rows[0].get("checks", {})
    failed = [k for k, ok in checks.items() if not ok]
    passed = bool(rows[0].get("passes")) and not failed
    reason = "the pilot's gate passed" if passed else f"the pilot's gate failed for {model_b}: {', '.join(failed)}"
    return {"passed": passed, "reason": reason, "checks": checks}
