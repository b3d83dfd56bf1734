"""`ftis-node experiment`: the paper's experiment in miniature (see ftis_swarm.lab.experiment.arms).

Flags (and `--set key=value` for any `ExperimentConfig` key, or any key of the `NodeConfig` both
learners share, with or without `node.`) are validated, one sentence and exit 2, before torch is
imported. A bar counts the runs; a line is printed per finished run;
at the end the table is printed and written with the plots and JSON.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import typer

from ftis_swarm.cli.app import LAB_PANEL, app, fail, renamed


def _pair(value: Optional[str], flag: str) -> Optional[list[str]]:
    if value is None:
        return None
    parts = [p.strip() for p in value.split(",") if p.strip()]
    if not parts:
        fail(f"{flag} needs a comma-separated list")
    return parts


@app.command(rich_help_panel=LAB_PANEL)
def experiment(
    quick: bool = typer.Option(False, "--quick", help="Tiny setting (1 seed, 1 round, the 5 arms, 8 held-out items): a couple of minutes."),
    specialist: bool = typer.Option(False, "--specialist", help="Issue 42's design: A on + and -, B a warm-started * specialist, both evaluated on both; its claims D1-D3 and sizing in specialist.md (pilot: --arms solo,vertical-ftis, seeds 200..203)."),
    run_dir: Optional[Path] = typer.Option(None, help="Folder for config.json, runs/*.json, summary.json, table.md (default runs/experiment, or runs/experiment-quick)."),
    figures: Optional[Path] = typer.Option(None, help="Folder for the PNG plots (default: <run-dir>/figures)."),
    arms: Optional[str] = typer.Option(None, help="Comma-separated arms: solo, solo-2x, vertical-<mode>[-stale<k>], horizontal-<mode>, a swarm arm optionally with @C=..,g=..,filter_rule=.. (modes: see join --help-modes)."),
    seeds: Optional[str] = typer.Option(None, help="Seeds: comma-separated (0,1,2) or a range (0..11, both ends included)."),
    rounds: Optional[int] = typer.Option(None, help="Rounds per run."),
    prompts_per_round: Optional[int] = typer.Option(None, help="Own prompts per learner per round (P)."),
    group_size: Optional[int] = typer.Option(None, "--group-size", "-G", help="Completions per prompt, G (even)."),
    temperature: Optional[float] = typer.Option(None, help="Sampling temperature."),
    max_new_tokens: Optional[int] = typer.Option(None, help="Most tokens per sampled completion."),
    model_a: Optional[str] = typer.Option(None, help="Learner A's model (default smollm2-135m)."),
    model_b: Optional[str] = typer.Option(None, help="Learner B's model (default smollm2-bias2: SmolLM2 with a fixed logit bias of scale 2, the second sigma pilot's choice; same tokenizer as A)."),
    lr_a: Optional[float] = typer.Option(None, help="Learner A's learning rate."),
    lr_b: Optional[float] = typer.Option(None, help="Learner B's learning rate."),
    lora_rank_a: Optional[int] = typer.Option(None, help="Train a LoRA adapter of this rank for A (default 0: the full model)."),
    lora_rank_b: Optional[int] = typer.Option(None, help="Train a LoRA adapter of this rank for B (default 0: the full model)."),
    dtype: Optional[str] = typer.Option(None, help="Learner autocast: fp32 or bf16."),
    limit: Optional[int] = typer.Option(None, help="Held-out test items (the same in every arm; default: every distinct one)."),
    eval_samples: Optional[int] = typer.Option(None, help="Sampled held-out completions an item beside the greedy one (default 8; 0: greedy only)."),
    task: Optional[str] = typer.Option(None, help="Training task (default arith_mix)."),
    eval_task: Optional[str] = typer.Option(None, help="Task of the held-out accuracy (default: the training task; math500 for the paper's)."),
    eval_max_new_tokens: Optional[int] = typer.Option(None, help="Most tokens per greedy held-out answer."),
    micro_batch: Optional[int] = typer.Option(None, help="Sequences per forward/backward (ftis-node plan says what fits)."),
    activation_checkpointing: Optional[bool] = typer.Option(None, "--activation-checkpointing/--no-activation-checkpointing", help="Recompute layer activations in backward."),
    pilot: Optional[Path] = typer.Option(None, help="The pilot's JSON (`ftis-node bench pilot --sigmas ... --json`, e.g. docs/pilot_sigma.json): whether its gate passed for learner B decides if the claims count as tested; its per-seed sd, when there, sizes the a-priori MDE."),
    workers: int = typer.Option(1, min=1, max=64, help="Runs in parallel, each in its own process."),
    threads: int = typer.Option(1, min=1, max=256, help="torch threads per process (workers x threads should not exceed the cores)."),
    resume: bool = typer.Option(True, "--resume/--no-resume", help="Reuse finished runs of the same settings in <run-dir>/runs."),
    sets: list[str] = typer.Option([], "--set", metavar="KEY=VALUE", help="Any ExperimentConfig key (eval_samples=4) or key of the learners' shared NodeConfig (task=gsm_symbolic, max_staleness=1, eval_max_new_tokens=32); repeatable; applied after the flags."),
    old_out: Optional[Path] = typer.Option(None, "--out", hidden=True),
    old_eval_items: Optional[int] = typer.Option(None, "--eval-items", hidden=True),
) -> None:
    """Two learners alone and together (solo, nois, tis, ftis, fvis), several seeds: the pre-registered claims."""
    from pydantic import ValidationError

    from ftis_swarm.cli.overrides import set_overrides
    from ftis_swarm.config import ConfigError, NodeConfig, format_validation_error
    from ftis_swarm.lab.experiment.config import ExperimentConfig, merged, quick_config

    out = renamed(run_dir, old_out, "--run-dir", "--out",
                  Path("runs/experiment-quick" if quick else "runs/experiment"))
    eval_items = renamed(limit, old_eval_items, "--limit", "--eval-items", None)
    if out.exists() and not out.is_dir():
        fail(f"--run-dir: {out} is not a folder")
    if figures is not None and figures.exists() and not figures.is_dir():
        fail(f"--figures: {figures} is not a folder")
    if pilot is not None and not pilot.is_file():
        fail(f"--pilot: {pilot} is not a file")
    # each flag sets one key: of the experiment, or (node.*) of the NodeConfig both learners share
    dotted: dict = {}
    arm_list, seed_list = _pair(arms, "--arms"), _pair(seeds, "--seeds")
    if arm_list is not None:
        dotted["arms"] = arm_list
    if seed_list is not None and len(seed_list) == 1 and ".." in seed_list[0]:
        first, _, last = seed_list[0].partition("..")
        if not (first.isdigit() and last.isdigit() and int(first) <= int(last)):
            fail(f"--seeds: a range is first..last with first <= last, got {seeds!r}")
        seed_list = [str(s) for s in range(int(first), int(last) + 1)]
    if seed_list is not None:
        if not all(s.isdigit() for s in seed_list):
            fail(f"--seeds must be non-negative integers, got {seeds!r}")
        dotted["seeds"] = [int(s) for s in seed_list]
    for key, value in {"node.rounds": rounds, "node.prompts_per_round": prompts_per_round,
                       "node.sampling.group_size": group_size, "node.sampling.temperature": temperature,
                       "node.sampling.max_new_tokens": max_new_tokens, "node.learner.dtype": dtype,
                       "node.eval_items": eval_items, "eval_samples": eval_samples, "node.task": task,
                       "eval_task": eval_task, "node.eval_max_new_tokens": eval_max_new_tokens,
                       "node.learner.micro_batch": micro_batch,
                       "node.learner.activation_checkpointing": activation_checkpointing}.items():
        if value is not None:
            dotted[key] = value
    if rounds is not None:  # the evaluated rounds and the end point follow the rounds, unless --set says otherwise
        dotted["eval_rounds"], dotted["end_round"] = [], None
    try:
        # --set takes an experiment key, or a key of the shared node with or without `node.` (max_staleness=1)
        for item in sets:
            key = item.partition("=")[0].strip()
            own = key.split(".")[0] in ExperimentConfig.model_fields
            dotted.update(set_overrides(ExperimentConfig, [item]) if own else
                          {f"node.{k}": v for k, v in set_overrides(NodeConfig, [item]).items()})
        if quick and specialist:
            fail("--quick and --specialist are two settings; give one")
        from ftis_swarm.lab.experiment.specialist import design_config

        base = (quick_config() if quick else design_config() if specialist else ExperimentConfig()).model_dump()
        learners = []
        for spec, model, lr, rank in zip(base["learners"], (model_a, model_b), (lr_a, lr_b), (lora_rank_a, lora_rank_b)):
            changes: dict = {k: v for k, v in dict(model=model, learner={"lr": lr} if lr else None).items() if v}
            if rank is not None:
                changes.setdefault("learner", {})["lora"] = {"rank": rank, "alpha": 2.0 * rank} if rank else None
            learners.append(merged(spec, changes))
        tree = {**base, "learners": learners}
        for key, value in dotted.items():
            *parents, leaf = key.split(".")
            at = tree
            for part in parents:
                if not isinstance(at.get(part), dict):  # a section that is None (learner.lora) gets its keys
                    at[part] = {}
                at = at[part]
            at[leaf] = value
        cfg = ExperimentConfig(**tree)
    except ConfigError as exc:
        fail(str(exc))
    except ValidationError as exc:
        fail(format_validation_error(exc))

    import json

    from ftis_swarm.lab.experiment.arms import pilot_gate

    pilot_data = None
    if pilot is not None:
        try:
            pilot_data = json.loads(pilot.read_text())
        except (OSError, ValueError) as exc:
            fail(f"--pilot: {pilot} is not a pilot's JSON ({exc})")
        if not isinstance(pilot_data, dict):
            fail(f"--pilot: {pilot} is not a pilot's JSON (not an object)")
    gate = pilot_gate(pilot_data, cfg.learners[1]["model"])

    from ftis_swarm.cli.app import setup_logging
    from ftis_swarm.cli.progress import Bar
    from ftis_swarm.lab.experiment.arms import run_experiment
    from ftis_swarm.lab.experiment.claims_tables import statistics, statistics_markdown
    from ftis_swarm.lab.experiment.report import format_table, plot_all

    total = len(cfg.arms) * len(cfg.seeds)
    typer.echo(f"experiment: {len(cfg.arms)} arms x {len(cfg.seeds)} seeds = {total} runs of {cfg.node.rounds} rounds, "
               f"{workers} at a time; results in {out}")
    setup_logging("warning")
    t0 = time.perf_counter()

    with Bar("runs", total=total) as bar:

        def progress(label: str, res: dict) -> None:
            if label == "warm":
                rewards = " ".join(f"{x['reward']:.2f}" for x in res["rounds"])
                bar.say(f"[{time.perf_counter() - t0:6.0f} s] {res['learner']} warm-started on {res['task']}: "
                        f"rewards by round {rewards} ({res['seconds']:.0f} s)")
                return
            if label == "start":
                accs = ", ".join(f"{n} {res[n]['accuracy']:.2f}" for n in cfg.learner_names)
                bar.say(f"[{time.perf_counter() - t0:6.0f} s] start held-out accuracy: {accs}")
                return
            bar.advance()
            end = res["evals"][-1]
            accs = ", ".join(f"{n} {end[n]['accuracy']:.2f}"
                             + (f" (sampled {end[n]['sampled_accuracy']:.2f})" if "sampled_accuracy" in end[n] else "")
                             for n in cfg.learner_names)
            bar.say(f"[{time.perf_counter() - t0:6.0f} s] {label}: held-out {accs} ({res['seconds']:.0f} s)")

        result = run_experiment(cfg, out, workers=workers, threads=threads, resume=resume, on_done=progress)
    result["wall_seconds"] = time.perf_counter() - t0
    result["workers"], result["threads"], result["gate"] = workers, threads, gate
    if specialist:
        from ftis_swarm.lab.experiment.specialist import markdown, plot, summary

        found = summary(result)
        (out / "summary.json").write_text(json.dumps(result))
        (out / "specialist.json").write_text(json.dumps(found, indent=1))
        (out / "specialist.md").write_text(markdown(found) + "\n")
        paths = plot(result, figures or out / "figures")
        typer.echo(markdown(found))
        typer.echo(f"wall time {result['wall_seconds']:.0f} s; results in {out}; plots: {', '.join(map(str, paths))}")
        return
    table = format_table(result)
    (out / "summary.json").write_text(json.dumps(result))
    (out / "table.md").write_text(table + "\n")
    pilot_sd = (pilot_data or {}).get("per_seed_sd")
    stats_md = statistics_markdown(result, gate["passed"], pilot_sd=pilot_sd)
    (out / "stats.json").write_text(json.dumps(statistics(result, gate["passed"], pilot_sd=pilot_sd), indent=1))
    (out / "stats.md").write_text(f"{gate['reason']}.\n\n{stats_md}\n")
    paths = plot_all(result, figures or out / "figures")
    typer.echo(table)
    typer.echo(f"\n{gate['reason']}.\n\n{stats_md}")
    typer.echo(f"wall time {result['wall_seconds']:.0f} s; results in {out}; plots: {', '.join(map(str, paths))}")
