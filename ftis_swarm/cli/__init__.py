"""The `ftis-node` command line (typer): parse, validate, then call into the layers below.

- app.py           the typer app and `bench` group, `Commands` (every UserError -> one sentence, exit 2),
                   `--version`, `--log-level`, `fail`, `renamed` (hidden old flag names), `setup_logging`
- main.py          the entry point: registers every command module's commands; `inspect` / `bootstrap`
- node_cmds.py     `join` (flags -> config keys, `--set`, FTIS_*), `testnet`, `eval`, `report`
- join_run.py      runs a node: machine checks, the live table, the closing summary
- testnet_run.py   runs the testnet: model preparation, the live table, the summary
- plan_cmd.py      `plan`: the GPUs and memory per GPU a node needs (`learner/plan.py`)
- experiment_cmd.py `experiment`
- bench_cmds.py    `bench wire | learner | e2e | hostile | swarm | rollout | attacks | resume | soak | pipeline`
                   (each calls its module in `ftis_swarm/lab/bench/`)
- pilot_cmd.py     `bench pilot`: the experiment's pilot gate for learner B
- overrides.py     `--set key=value` and `FTIS_*` environment variables -> dotted config keys
- live.py          the round tables of join and testnet (rich), and the per-round log line
- progress.py      status lines and bars on the terminal (rich), plain lines elsewhere
- inspect_cmd.py   `ftis-node inspect`: a group file's header and statistics
- status_cmd.py    `ftis-node status`: a node's status document (ops/status.py) as tables

The command modules import `app.py`, never `main.py` (which imports them): no import circle.
The only layer that prints; it may import every layer below (lab, ops, node, and theirs). torch,
transformers and hivemind are imported inside the commands, so `ftis-node --help` answers at once.
"""
