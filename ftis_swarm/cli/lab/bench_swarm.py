"""`ftis-node bench hostile | swarm | scale | reach | attacks | overlap`: the swarm's benches, on loopback or real NAT.

As `bench.py`'s: flags checked first (ranges by typer's `min=`/`max=`), then a table against
a baseline measured in the same run, and with `--json` the figures.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Optional

import typer

from ftis_swarm.cli.app import fail
from ftis_swarm.cli.lab.bench import bench_app, check_json_path, progress_line, report_figures

CROWD_PHASES = ("credit", "strike", "stall", "fill", "recover", "copy")
"""`lab/bench/crowd_phases.py`'s `PHASES`, here so that a refused flag does not import the nodes."""


@bench_app.command("hostile")
def bench_hostile(
    rounds: Optional[int] = typer.Option(None, min=1, help="Rounds per phase at least (a phase lasts until its attack is over); "
                                                          "default 5, with the crowd's phases 12 (--quick: 3)."),
    groups: int = typer.Option(2, min=1, help="Groups of 32 KiB each node publishes per round."),
    deadline: float = typer.Option(2.0, "--round-deadline", help="Seconds each gather waits."),
    identities: int = typer.Option(50, min=1, max=1000, help="Identities of the attacker that only sign."),
    pointers: int = typer.Option(5000, min=1, max=100_000, help="Pointers in the pointer flood, spread over the identities."),
    random_keys: int = typer.Option(10000, min=1, max=100_000, help="Records under random keys."),
    dictionary_items: int = typer.Option(20000, min=1, max=1_000_000, help="Unknown msgpack extension types in one dictionary store."),
    bad_bodies: int = typer.Option(16, min=1, help="Pointers per bad body server (stall, silence, dribble, endless)."),
    phase: str = typer.Option("attacks", help="attacks: the 3-node testnet under each attack; identities: what "
                                              "identities cost at the default puzzle, and a crowd from one origin; "
                                              "have-flood: one gather's loop work under a flood of haves, in-process; "
                                              "crowd: a crowd on as many origins against the tiny testnet, every crowd "
                                              "phase after a baseline; or some of credit,strike,stall,fill,recover,copy (comma-separated)."),
    crowd: int = typer.Option(20, min=1, max=200, help="--phase identities: identities of the crowd, all from one origin; "
                                                        "the crowd's phases: identities, each on its own origin (--quick: 4)."),
    quick: bool = typer.Option(False, "--quick", help="The crowd's phases small: 4 identities, 3 rounds a phase, fill 300."),
    crowd_pointers: int = typer.Option(6000, min=1, max=100_000, help="--phase identities: pointers the crowd floods, spread over it."),
    crowd_processes: int = typer.Option(3, min=1, max=8, help="--phase identities: requesting peers (processes) of the crowd, at most --crowd."),
    fill: int = typer.Option(1900, min=1, max=20_000, help="Pointers each of the 10 filling identities (each its own daemon) stores."),
    storage_mib: float = typer.Option(32.0, min=1, max=4096, help="Each node's max_stored_bytes, MiB (the fill is meant to pass it)."),
    memory_records: int = typer.Option(2000, min=0, max=100_000, help="Records stored in-process to measure one's memory (0: skip)."),
    have_ids: int = typer.Option(100_000, min=1, max=1_000_000, help="--phase have-flood: random group ids the flooding haves name."),
    have_holders: int = typer.Option(20, min=1, max=1000, help="--phase have-flood: identities the flooding haves come from."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Also write the figures as JSON to this file."),
) -> None:
    """A 3-node testnet under each attack of a hostile peer, a storage fill and a ban of an honest peer: honest
    groups per round against the baseline, honest bans, attackers banned, every process's peak RSS
    (`--phase identities`: the cost of identities, and the storage share of a crowd from one origin;
    `--phase have-flood`: a gatherer's loop time for one gather under a flood of haves, against none;
    `--phase crowd`: a crowd of identities on as many origins farms credit, strikes, stalls, fills (then falls silent) and copies
    against the tiny testnet, per phase and node against a baseline)."""
    crowd_phases = CROWD_PHASES if phase == "crowd" else tuple(p.strip() for p in phase.split(","))
    is_crowd = set(crowd_phases) <= set(CROWD_PHASES)
    if phase not in ("attacks", "identities", "have-flood") and not is_crowd:
        fail(f"--phase must be attacks, identities, have-flood, crowd or some of {','.join(CROWD_PHASES)}, not {phase!r}")
    if deadline <= 0:
        fail("--round-deadline must be more than 0 seconds")
    check_json_path(json_path)
    if is_crowd:
        from ftis_swarm.cli.overrides import env_overrides
        from ftis_swarm.config import NodeConfig, load_node_config
        from ftis_swarm.lab.bench.crowd_phases import format_crowd_phases, run_crowd_phases

        swarm_env = {k: v for k, v in env_overrides(NodeConfig).items() if k.startswith("swarm.")}
        puzzle = load_node_config(None, swarm_env).swarm.puzzle  # the default, or FTIS_SWARM__PUZZLE__* set here
        with tempfile.TemporaryDirectory(prefix="ftis-bench-crowd-") as tmp:
            figures = run_crowd_phases(phases=crowd_phases, crowd=4 if quick else crowd,
                                       rounds=rounds or (3 if quick else 12), fill=300 if quick else fill,
                                       workdir=Path(tmp), puzzle=puzzle, progress=progress_line)
        report_figures(format_crowd_phases(figures), figures, json_path)
        return
    rounds = rounds or 5
    if phase == "have-flood":
        from ftis_swarm.lab.bench.have_flood import format_have_flood, run_have_flood_bench

        figures = run_have_flood_bench(ids=have_ids, holders=have_holders, deadline=deadline)
        report_figures(format_have_flood(figures), figures, json_path)
        return
    if phase == "identities":
        if crowd_processes > crowd:
            fail(f"--crowd-processes must be at most --crowd ({crowd})")
        from ftis_swarm.cli.overrides import env_overrides
        from ftis_swarm.config import NodeConfig, load_node_config
        from ftis_swarm.lab.bench.identities import format_identities, run_identity_bench

        swarm_env = {k: v for k, v in env_overrides(NodeConfig).items() if k.startswith("swarm.")}
        swarm = load_node_config(None, swarm_env).swarm  # the defaults, or the FTIS_SWARM__* keys set here
        figures = run_identity_bench(swarm=swarm, crowd=crowd, processes=crowd_processes, honest=2, pointers=crowd_pointers, rounds=rounds,
                                     deadline=deadline, progress=progress_line)
        report_figures(format_identities(figures), figures, json_path)
        return
    from ftis_swarm.lab.bench.hostile import format_hostile, run_hostile_bench

    bench = run_hostile_bench(rounds=rounds, groups=groups, deadline=deadline, identities=identities,
                              pointers=pointers, random_keys=random_keys, dictionary_items=dictionary_items,
                              bad_bodies=bad_bodies, fill=fill, storage_mib=storage_mib,
                              memory_records=memory_records, progress=progress_line)
    report_figures(format_hostile(bench), bench, json_path)


@bench_app.command("swarm")
def bench_swarm(
    nodes: Optional[list[int]] = typer.Option(None, min=2, max=32, help="Swarm size to measure (repeatable); default 2, 4 and 8."),
    groups: int = typer.Option(8, min=1, max=64, help="Groups each node publishes per group size."),
    transport: Optional[list[str]] = typer.Option(None, help="gossip or poll (repeatable); default both, poll the baseline."),
    poll_interval: Optional[float] = typer.Option(None, help="Seconds between pointer reads with gossip off (default: the config's)."),
    round_seconds: float = typer.Option(5.0, min=0, max=600, help="Seconds a round lasts at least, for the traffic per peer per round."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Also write the figures as JSON to this file."),
) -> None:
    """Publish-to-visible latency (p50, p95), groups/s and traffic per peer for 32 KiB and 1 MiB groups."""
    from ftis_swarm.config import FetchConfig

    counts = nodes or [2, 4, 8]
    transports = tuple(transport or ["gossip", "poll"])
    if any(t not in ("gossip", "poll") for t in transports):
        fail("--transport must be gossip or poll")
    interval = poll_interval if poll_interval is not None else FetchConfig().poll_interval
    if not 0 < interval <= 60:
        fail("--poll-interval must be in (0, 60] seconds")
    check_json_path(json_path)
    from ftis_swarm.lab.bench.swarm import format_table, rows_as_json, run_swarm_bench

    rows = run_swarm_bench(counts, groups_per_node=groups, poll_interval=interval, transports=transports,
                           round_seconds=round_seconds)
    typer.echo(format_table(rows, poll_interval=interval, round_seconds=round_seconds))
    if json_path is not None:
        json_path.write_text(rows_as_json(rows, poll_interval=interval, groups_per_node=groups,
                                          round_seconds=round_seconds))


@bench_app.command("scale")
def bench_scale(
    nodes: Optional[list[int]] = typer.Option(None, min=2, max=128, help="Swarm size to measure (repeatable); default 8, 16 and 32."),
    layout: Optional[list[str]] = typer.Option(None, help="budget, all or holders (repeatable); default budget and "
                                               "all, all the baseline; holders: capped uploads, one publisher leaves."),
    rounds: int = typer.Option(4, min=1, max=100, help="Rounds reported per size (after one unreported warm-up round)."),
    period: float = typer.Option(5.0, min=0.5, max=600, help="Seconds between two rounds of a node (and a gather's deadline)."),
    groups: int = typer.Option(16, min=1, max=32, help="Groups a node publishes a round (the paper's 16; at most what one round pointer names)."),
    size_kib: int = typer.Option(48, min=1, max=1024, help="KiB of one synthetic group (the paper's about 48)."),
    per_worker: int = typer.Option(4, min=1, max=64, help="Nodes sharing one worker process (each its own p2pd and key)."),
    bodies_per_stream: Optional[list[int]] = typer.Option(
        None, min=1, max=32, help="max_bodies_per_stream of every node (repeatable: each its own swarm, same run); default 8; "
                   "1 is one body per stream."),
    read_clock: Optional[list[str]] = typer.Option(
        None, help="deadline or task (repeatable: each its own swarm, same run): how each body read is timed, a "
                   "deadline on the running task (default, Python 3.11+) or a task of its own (wait_for)."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Also write the figures as JSON to this file."),
) -> None:
    """Per node and round: bodies, body bytes, messages and pointer bytes, fill time, CPU; with and without a budget."""
    counts = nodes or [8, 16, 32]
    layouts = tuple(layout or ["budget", "all"])
    if any(x not in ("budget", "all", "holders") for x in layouts):
        fail("--layout must be budget, all or holders")
    per_stream = tuple(bodies_per_stream or [8])
    reads = tuple(read_clock or ["deadline"])
    if any(r not in ("deadline", "task") for r in reads):
        fail("--read-clock must be deadline or task")
    check_json_path(json_path)
    from ftis_swarm.lab.bench.scale import format_table, paper_budget, rows_as_json, run_scale_bench

    size = size_kib * 1024
    rows = run_scale_bench(counts, layouts=layouts, rounds=rounds, period=period, groups=groups, size=size,
                           clients_per_worker=per_worker, bodies_per_stream=per_stream, read_clocks=reads,
                           progress=progress_line)
    budget = paper_budget(groups=groups, size=size)
    typer.echo(format_table(rows, period=period, groups=groups, size=size, budget=budget))
    if json_path is not None:
        json_path.write_text(rows_as_json(rows, extra={"period": period, "groups": groups, "size": size}))
        typer.echo(f"written to {json_path}")


@bench_app.command("reach")
def bench_reach(
    rounds: int = typer.Option(5, min=1, max=200, help="Rounds per arm."),
    groups: int = typer.Option(2, min=1, max=16, help="Groups each node publishes per round."),
    size: int = typer.Option(32 * 1024, min=1024, max=4 * 1024 * 1024, help="Bytes per group (1 KiB to 4 MiB)."),
    deadline: float = typer.Option(10.0, "--round-deadline", help="Seconds a round waits for every peer's groups."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Also write the figures as JSON to this file."),
    phase: str = typer.Option("nat", help="nat: home nodes behind real NAT; bootstrap: the bootstrap killed "
                                          "mid-run, on loopback (no root); relay: the relay under a hostile "
                                          "relayed pair, on real NAT; punch: whether two relayed homes get a "
                                          "direct connection (hole punching), per testbed variant."),
    nodes: int = typer.Option(6, min=3, max=32, help="Nodes joining through one bootstrap (--phase bootstrap)."),
    relay_data_limit: int = typer.Option(1 << 20, help="The bootstrap's bytes per relayed connection (--phase relay)."),
    relay_circuits: int = typer.Option(4, help="The bootstrap's relay circuits per peer (--phase relay)."),
    runs: int = typer.Option(1, min=1, max=20, help="Runs per testbed variant (--phase punch)."),
    logs: Optional[Path] = typer.Option(None, help="Keep every process's log in this folder (--phase nat, punch; "
                                                   "default: a temporary folder, deleted)."),
    variant: Optional[list[str]] = typer.Option(None, help="Testbed variants (--phase punch; repeat; default all): "
                                                           "as-built, observers, drop, observers+drop."),
) -> None:
    """Home nodes behind real NAT (network namespaces, needs root): relayed against client mode, and what
    auto chooses; or a swarm that outlives its bootstrap (--phase bootstrap), the relay under a hostile
    relayed pair (--phase relay), or hole punching between relayed homes (--phase punch)."""
    if deadline <= 0:
        fail("--round-deadline must be more than 0 seconds")
    if phase not in ("nat", "bootstrap", "relay", "punch"):
        fail(f"--phase must be nat, bootstrap, relay or punch, not {phase!r}")
    check_json_path(json_path)
    if phase == "bootstrap":
        from ftis_swarm.lab.bench.reach_bootstrap import format_bootstrap_phase, run_bootstrap_phase

        result = run_bootstrap_phase(nodes=nodes, rounds=rounds, groups=groups, size=size, timeout=deadline,
                                     progress=progress_line)
        report_figures(format_bootstrap_phase(result), result, json_path)
        return
    from ftis_swarm.lab.bench.nat_testbed import unavailable_reason

    reason = unavailable_reason()
    if reason:
        fail(reason)
    if phase == "relay":
        from ftis_swarm.lab.bench.reach_relay import format_relay_phase, run_relay_phase

        relay = run_relay_phase(rounds=rounds, groups=groups, size=size, deadline=deadline, data_limit=relay_data_limit,
                                max_circuits=relay_circuits, progress=progress_line)
        report_figures(format_relay_phase(relay), relay, json_path)
        return
    if phase == "punch":
        from ftis_swarm.lab.bench.reach_punch import VARIANTS, format_punch_phase, run_punch_phase

        unknown = [v for v in variant or [] if v not in VARIANTS]
        if unknown:
            fail(f"unknown --variant {unknown[0]!r}: one of {', '.join(VARIANTS)}")
        punch = run_punch_phase(variants=variant or list(VARIANTS), runs=runs, rounds=rounds, groups=groups,
                                size=size, deadline=deadline, progress=progress_line, logs=logs)
        report_figures(format_punch_phase(punch), punch, json_path)
        return
    from ftis_swarm.lab.bench.reach import format_reach, run_reach_bench

    bench = run_reach_bench(rounds=rounds, groups=groups, size=size, deadline=deadline, progress=progress_line, logs=logs)
    report_figures(format_reach(bench), bench, json_path)


@bench_app.command("attacks")
def bench_attacks(
    preset: str = typer.Option("default", help="default: the testnet's SmolLM2 models; tiny: tiny random models (seconds)."),
    rounds: int = typer.Option(2, min=1, help="Rounds of the receiving node, one group of each attack a round."),
    honest_groups: int = typer.Option(24, min=1, help="Honest groups per model pair fed to the forgery detector."),
    forged_groups: int = typer.Option(8, min=1, help="Forged groups (logp_gen - 3) per model pair."),
    threads: int = typer.Option(1, min=1, help="torch CPU threads."),
    standing_rounds: int = typer.Option(6, min=0, help="Rounds of the standing part (a crowd of fresh identities); 0: none."),
    crowd_daemons: int = typer.Option(0, min=0, max=60, help="Identities of the crowd with daemons (each its own p2pd, one origin) against a Node on the real swarm; 0: none."),
    crowd_rounds: int = typer.Option(6, min=1, help="Rounds of the crowd with daemons, after its earned peers' warm-up."),
    run_dir: Path = typer.Option(Path("runs/bench-attacks"), "--run-dir", help="Where the tiny preset builds its models."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Also write the figures as JSON to this file."),
) -> None:
    """What of each hostile group reaches an update, and the forgery detector's delay and false alarms."""
    if preset not in ("default", "tiny"):
        fail("--preset must be 'default' or 'tiny'")
    check_json_path(json_path)
    from ftis_swarm.lab.bench.attacks import format_attacks, run_attack_bench

    figures = run_attack_bench(preset=preset, workdir=run_dir, rounds=rounds, honest_groups=honest_groups,
                               forged_groups=forged_groups, threads=threads, standing_rounds=standing_rounds,
                               crowd_daemons=crowd_daemons, crowd_rounds=crowd_rounds, progress=progress_line)
    report_figures(format_attacks(figures), figures, json_path)


@bench_app.command("overlap")
def bench_overlap(
    preset: str = typer.Option("default", help="default: the testnet's SmolLM2 models and smollm2-bias2; tiny: the tiny preset's models (seconds)."),
    groups: int = typer.Option(8, min=1, max=64, help="Arith groups sampled from each model; each is one update's block."),
    threads: int = typer.Option(2, min=1, help="torch CPU threads."),
    run_dir: Path = typer.Option(Path("runs/bench-overlap"), "--run-dir", help="Where the tiny preset builds its models."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Also write the figures as JSON to this file."),
) -> None:
    """Honest peers' overlap (ratios in [1/C, C]) per model pair against a deflator's and a strike's: standing's q."""
    if preset not in ("default", "tiny"):
        fail("--preset must be 'default' or 'tiny'")
    check_json_path(json_path)
    from ftis_swarm.lab.bench.overlap import format_overlap, run_overlap_bench

    figures = run_overlap_bench(preset=preset, groups=groups, threads=threads, workdir=run_dir, progress=progress_line)
    report_figures(format_overlap(figures), figures, json_path)
