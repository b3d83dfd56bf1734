"""`ftis-node join | testnet | eval | report`: a node, a local swarm, and reading their results.

`join`'s flags each set one dotted key of `NodeConfig` (listed in `JOIN_FLAGS`); any other
key is set with `--set key=value` or an `FTIS_*` environment variable (cli/overrides.py).
Precedence, lowest first: the defaults, `--config FILE`, the environment, the flags, `--set`.
The whole config is validated, and the task, the model name and the sinks checked, before
anything heavy is imported, so a mistake costs a fraction of a second and one sentence.

Names shared across commands: `--run-dir` (the folder a command writes its runs into),
`--json` (a results file), `--round-deadline`, `--prompts-per-round`, `--group-size`/`-G`,
`--limit` (held-out items), `--max-new-tokens`. Older spellings still work, unlisted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ftis_swarm.cli.app import app, fail, renamed

JOIN_FLAGS = {
    "model": "model",
    "task": "task",
    "run_dir": "run_dir",
    "rounds": "rounds",
    "prompts_per_round": "prompts_per_round",
    "round_deadline": "round_deadline",
    "checkpoint_every": "checkpoint_every",
    "backend": "backend",
    "vllm_memory": "vllm_gpu_memory_utilization",
    "vllm_tp": "vllm_tensor_parallel_size",
    "seed": "seed",
    "threads": "threads",
    "metrics_port": "metrics_port",
    "metrics_host": "metrics_host",
    "status_port": "status_port",
    "status_host": "status_host",
    "group_size": "sampling.group_size",
    "temperature": "sampling.temperature",
    "max_new_tokens": "sampling.max_new_tokens",
    "lr": "learner.lr",
    "epochs": "learner.epochs",
    "dtype": "learner.dtype",
    "activation_checkpointing": "learner.activation_checkpointing",
    "lora_rank": "learner.lora.rank",
    "mode": "learner.ftis.mode",
    "peers": "swarm.transport.peers",
    "peers_file": "swarm.transport.peers_file",
    "host": "swarm.transport.host",
    "port": "swarm.transport.port",
    "announce": "swarm.transport.announce",
    "client_mode": "swarm.transport.client_mode",
    "reachability": "swarm.transport.reachability",
    "identity": "swarm.identity",
    "run_id": "swarm.run_id",
}
"""Flag (as a Python name) -> the config key it sets. docs/node.md lists both."""
SET_HELP = ("KEY=VALUE for any config key, dotted (learner.ftis.C=3, swarm.records.ttl=300); repeatable; applied "
            "after the flags. FTIS_LEARNER__FTIS__C=3 in the environment does the same.")


@app.command()
def join(
    model: Optional[str] = typer.Option(None, help="Hub id, local path or short name (Qwen2.5-1.5B, smollm2-135m, smollm2-slim, smollm2-mini). [config: model; default smollm2-135m]"),
    peers: Optional[list[str]] = typer.Option(None, help="Multiaddr of a peer in the swarm, e.g. a bootstrap peer (repeatable). [swarm.transport.peers]"),
    peers_file: Optional[Path] = typer.Option(None, help="A file of multiaddrs, one per line, e.g. written by `bootstrap --maddrs-file`. [swarm.transport.peers_file]"),
    config: Optional[Path] = typer.Option(None, help="A TOML config file; the environment, flags and --set override its values."),
    task: Optional[str] = typer.Option(None, help="Task of this node's own prompts: arith, arith_mix, gsm_symbolic, gsm8k, ..., jsonl:PATH (details in [task_options]) or rg:NAME (docs/tasks.md). [task]"),
    lora_rank: Optional[int] = typer.Option(None, help="Train a LoRA adapter of this rank instead of the full model (lr then defaults to 1e-5). [learner.lora.rank]"),
    run_dir: Optional[Path] = typer.Option(None, help="Run directory: metrics, config, checkpoints, log. [run_dir]"),
    rounds: Optional[int] = typer.Option(None, help="Rounds to run. [rounds]"),
    prompts_per_round: Optional[int] = typer.Option(None, help="Own prompts (groups) per round. [prompts_per_round]"),
    group_size: Optional[int] = typer.Option(None, "--group-size", "-G", help="Completions per prompt, G. [sampling.group_size]"),
    temperature: Optional[float] = typer.Option(None, help="Sampling temperature. [sampling.temperature]"),
    max_new_tokens: Optional[int] = typer.Option(None, help="Most tokens per completion (default: the task's, 64 for arith, 512-1024 for word problems). [sampling.max_new_tokens]"),
    lr: Optional[float] = typer.Option(None, help="Learning rate (default 1e-6; 1e-5 with --lora-rank). [learner.lr]"),
    epochs: Optional[int] = typer.Option(None, help="PPO epochs per batch. [learner.epochs]"),
    dtype: Optional[str] = typer.Option(None, help="fp32 or bf16 (autocast). [learner.dtype]"),
    mode: Optional[str] = typer.Option(None, help="Loss mode, ftis by default; --help-modes lists each mode and what it does. [learner.ftis.mode]"),
    round_deadline: Optional[float] = typer.Option(None, help="Most seconds to gather peers' groups each round (less once every live peer's round is in). [round_deadline]"),
    checkpoint_every: Optional[int] = typer.Option(None, help="Rounds between checkpoints. [checkpoint_every]"),
    backend: Optional[str] = typer.Option(None, help="auto, transformers or vllm. [backend]"),
    vllm_memory: Optional[float] = typer.Option(None, help="Share of the GPU vLLM may take when it shares it with the learner. [vllm_gpu_memory_utilization]"),
    vllm_tp: Optional[int] = typer.Option(None, help="GPUs one vLLM engine spans (tensor parallel). [vllm_tensor_parallel_size]"),
    activation_checkpointing: Optional[bool] = typer.Option(None, "--activation-checkpointing/--no-activation-checkpointing", help="Recompute layer activations in backward. [learner.activation_checkpointing]"),
    seed: Optional[int] = typer.Option(None, help="Seed of prompt sampling and generation. [seed]"),
    threads: Optional[int] = typer.Option(None, help="torch CPU threads. [threads]"),
    metrics_port: Optional[int] = typer.Option(None, help="Serve Prometheus /metrics on this port. [metrics_port]"),
    metrics_host: Optional[str] = typer.Option(None, help="Address of the /metrics endpoint (0.0.0.0 in a container). [metrics_host]"),
    status_port: Optional[int] = typer.Option(None, help="Serve the status page (/ and /status.json) on this port; 0 picks one. [status_port]"),
    status_host: Optional[str] = typer.Option(None, help="Address of the status page (default 127.0.0.1). [status_host]"),
    host: Optional[str] = typer.Option(None, help="Address to listen on. [swarm.transport.host]"),
    port: Optional[int] = typer.Option(None, help="TCP port to listen on; 0 picks one. [swarm.transport.port]"),
    announce: Optional[list[str]] = typer.Option(None, help="Multiaddr to announce instead (repeatable). [swarm.transport.announce]"),
    client_mode: Optional[bool] = typer.Option(None, "--client-mode/--no-client-mode", help="Accept no incoming connections. [swarm.transport.client_mode]"),
    reachability: Optional[str] = typer.Option(None, help="auto, public, relayed (behind NAT, via the bootstrap's relay) or client. [swarm.transport.reachability]"),
    identity: Optional[Path] = typer.Option(None, help="Identity (private key) file, created on first start and "
                                                            "kept; default <run-dir>/identity.key. [swarm.identity]"),
    run_id: Optional[str] = typer.Option(None, help="Swarm run name; only groups of the same run are used. [swarm.run_id]"),
    sets: list[str] = typer.Option([], "--set", metavar="KEY=VALUE", help=SET_HELP),
    table: bool = typer.Option(True, "--table/--no-table", help="Show a live table in a terminal (else one line per round)."),
    print_config: bool = typer.Option(False, "--print-config", help="Validate, print the resolved config as JSON, and exit."),
    print_keys: bool = typer.Option(False, "--print-keys", help="Print every config key, section by section, with its default and what it does, and exit."),
    help_modes: bool = typer.Option(False, "--help-modes", help="Print what each loss mode does, and exit."),
    nproc_per_node: int = typer.Option(1, min=1, help="Learner processes (GPUs) on this machine: reruns this command under torchrun; rank 0 is the node."),
) -> None:
    """Join a swarm (or start one) and train this node's model on its own and its peers' groups."""
    values = dict(locals())
    if help_modes:
        from ftis_swarm.config import LOSS_MODES

        typer.echo("loss modes (--mode, config key learner.ftis.mode; x = logp_old - logp_gen):")
        for name, spec in LOSS_MODES.items():
            typer.echo(f"  {name:<7} {spec.summary}")
        return
    from ftis_swarm.cli.overrides import env_overrides, key_docs, set_overrides
    from ftis_swarm.config import NodeConfig, dump_node_config, load_node_config
    from ftis_swarm.node.preflight import check_config, with_task_defaults

    if print_keys:
        typer.echo("\n".join(key_docs(NodeConfig)))
        return
    flags = {key: values[name] for name, key in JOIN_FLAGS.items() if values[name] is not None}
    overrides = {**env_overrides(NodeConfig), **flags, **set_overrides(NodeConfig, sets)}
    cfg = with_task_defaults(load_node_config(config, overrides, keep_none=True))
    check_config(cfg)
    if print_config:
        typer.echo(dump_node_config(cfg))
        return
    import os

    if nproc_per_node > 1 and "WORLD_SIZE" not in os.environ:  # not yet under torchrun: become torchrun
        import sys

        from ftis_swarm.cli.join_run import torchrun_argv

        argv = torchrun_argv(sys.argv[1:], nproc_per_node)
        os.execv(argv[0], argv)
    from ftis_swarm.cli.join_run import run_node

    run_node(cfg, table=table)


@app.command()
def testnet(
    nodes: int = typer.Option(3, min=1, max=16, help="Nodes to start (the preset's models, round-robin)."),
    rounds: Optional[int] = typer.Option(None, min=1, help="Rounds per node (default: the preset's: 5, tiny: 2)."),
    preset: str = typer.Option("default", help="default: SmolLM2 full / LoRA / a sibling; tiny: seconds-long smoke run."),
    run_dir: Optional[Path] = typer.Option(None, help="Where each node's run directory goes [default: runs/testnet]."),
    task: Optional[str] = typer.Option(None, help="Task of every node (default arith)."),
    mode: Optional[str] = typer.Option(None, help="Loss mode of every node (default ftis; see join --help-modes)."),
    temperature: Optional[float] = typer.Option(None, help="Sampling temperature of every node (default 0.7)."),
    group_size: Optional[int] = typer.Option(None, "--group-size", "-G", help="Completions per prompt, G (default 8)."),
    prompts_per_round: Optional[int] = typer.Option(None, help="Own prompts per node per round (default 2)."),
    max_new_tokens: Optional[int] = typer.Option(None, help="Most tokens per completion (default 16)."),
    round_deadline: Optional[float] = typer.Option(None, help="Seconds each node gathers peers' groups a round (default 4)."),
    sibling: Optional[str] = typer.Option(None, help="Model of the default preset's third node (default smollm2-slim, SmolLM2 with 28 of 30 layers)."),
    qwen_peer: bool = typer.Option(False, "--qwen-peer", help="One more node, on the Qwen vocabulary (a tiny model taught arith's answers); every node fetches other tokenizers' groups."),
    seed: int = typer.Option(0, min=0, help="Seed of the run: node i gets seed 1000 x seed + i (prompts, sampling, init)."),
    sets: list[str] = typer.Option([], "--set", metavar="KEY=VALUE", help="A config key of every node (see join --set); repeatable."),
    table: bool = typer.Option(True, "--table/--no-table", help="Show a live table in a terminal (else one line per round)."),
    old_workdir: Optional[Path] = typer.Option(None, "--workdir", hidden=True),
) -> None:
    """Start a bootstrap peer and N heterogeneous nodes on 127.0.0.1; show progress; summarise."""
    workdir = renamed(run_dir, old_workdir, "--run-dir", "--workdir", Path("runs/testnet"))
    if preset not in ("default", "tiny"):
        fail(f"--preset must be 'default' or 'tiny', not {preset!r}")
    if sibling is not None and preset != "default":
        fail("--sibling sets the third node of the default preset; drop it with --preset tiny")
    node_flags = {"task": task, "mode": mode, "temperature": temperature, "group_size": group_size,
                  "prompts_per_round": prompts_per_round, "max_new_tokens": max_new_tokens,
                  "round_deadline": round_deadline}
    given = {name: value for name, value in node_flags.items() if value is not None}
    _check_node_settings(given, sets, sibling)
    extra = tuple(arg for name, value in given.items() for arg in ("--" + name.replace("_", "-"), str(value)))
    extra += tuple(arg for item in sets for arg in ("--set", item))
    from ftis_swarm.cli.testnet_run import run_testnet_cli

    raise typer.Exit(run_testnet_cli(workdir=workdir, nodes=nodes, rounds=rounds, preset_name=preset, extra=extra,
                                     sibling=sibling, table=table, seed=seed, qwen_peer=qwen_peer))


def _check_node_settings(flags: dict[str, object], sets: list[str], sibling: Optional[str]) -> None:
    """What every node will be given, validated as `join` would, before any process starts."""
    from ftis_swarm.cli.overrides import env_overrides, set_overrides
    from ftis_swarm.config import NodeConfig, load_node_config
    from ftis_swarm.models import check_model_name
    from ftis_swarm.node.preflight import check_config

    overrides = {**env_overrides(NodeConfig), **{JOIN_FLAGS[name]: value for name, value in flags.items()},
                 **set_overrides(NodeConfig, sets)}
    check_config(load_node_config(None, overrides, keep_none=True))
    if sibling is not None:
        check_model_name(sibling)


@app.command("eval")
def eval_cmd(
    model: str = typer.Option(..., help="Hub id, short name, local path, checkpoint model/ or adapter/ directory."),
    task: str = typer.Option("gsm8k", help="gsm8k, math500, gsm_symbolic, champ or arith."),
    limit: Optional[int] = typer.Option(None, min=1, help="Evaluate the first N held-out items (default: all)."),
    max_new_tokens: Optional[int] = typer.Option(None, min=1, help="Most tokens per greedy answer (default: the task's)."),
    batch_size: int = typer.Option(8, min=1, help="Prompts per generate call."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Write the result as JSON here (default: eval-<task>.json)."),
    backend: str = typer.Option("auto", help="auto (vLLM on CUDA when installed, else transformers; CUDA when present), transformers or vllm."),
    old_out: Optional[Path] = typer.Option(None, "--out", hidden=True),
) -> None:
    """Greedy pass@1 on a task's held-out split (on the GPU when there is one); prints it and writes it as JSON."""
    path = renamed(json_path, old_out, "--json", "--out", Path(f"eval-{task}.json"))
    if backend not in ("auto", "transformers", "vllm"):
        fail(f"--backend must be auto, transformers or vllm, not {backend!r}")
    if not path.parent.is_dir():
        fail(f"--json: folder {path.parent} does not exist")
    from ftis_swarm.tasks import task_class

    tokens = max_new_tokens or task_class(task).max_new_tokens
    typer.echo(f"eval: {model} on {task} (held-out split), greedy, at most {tokens} new tokens")
    import json

    from ftis_swarm.cli.progress import Bar
    from ftis_swarm.ops.evaluate import evaluate

    with Bar("answering", total=None) as bar:
        result = evaluate(model, task, limit=limit, max_new_tokens=tokens, batch_size=batch_size,
                          on_batch=lambda done, total: bar.update(done, total=total), backend=backend)
    typer.echo(f"{task} greedy pass@1 = {result['pass_at_1']:.4f} ({result['correct']}/{result['items']}) "
               f"for {model} in {result['seconds']:.0f} s ({result['backend']} on {result['device']})")
    path.write_text(json.dumps(result, indent=2))
    typer.echo(f"written to {path}")


@app.command()
def report(
    run_dirs: list[Path] = typer.Argument(..., help="Run directories (each with a metrics.jsonl)."),
    png: Optional[Path] = typer.Option(None, "--png", help="The PNG to write [default: report.png]."),
    smooth: int = typer.Option(1, min=1, help="Moving average over this many rounds."),
    old_out: Optional[Path] = typer.Option(None, "--out", hidden=True),
) -> None:
    """Plot the runs' reward, held-out accuracy, filter and weight curves (one line per node) into a PNG."""
    out = renamed(png, old_out, "--png", "--out", Path("report.png"))
    missing = [str(d) for d in run_dirs if not (d / "metrics.jsonl").is_file()]
    if missing:
        fail(f"no metrics.jsonl in {', '.join(missing)}")
    from ftis_swarm.ops.report import plot_runs
    from ftis_swarm.ops.summary import format_summary, summarize_run

    typer.echo(format_summary([summarize_run(d) for d in run_dirs]))
    typer.echo(f"plots written to {plot_runs(list(run_dirs), out, smooth=smooth)}")
