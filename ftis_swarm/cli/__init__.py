"""The `ftis-node` command line (typer): parse, validate, then call into the layers below.

The node's commands (the product):

- app.py           the typer app, `Commands` (every UserError and every flag typer refuses -> one sentence,
                   exit 2; `--help` under headings, the node's first), `--version`, `--log-level`, `fail`,
                   `renamed` (hidden old flag names), `setup_logging`
- main.py          the entry point: registers every command module's commands; `inspect` / `bootstrap`
- node_cmds.py     `join` (flags -> config keys, `--set`, FTIS_*), `testnet`, `eval`, `report`
- join_run.py      runs a node: machine checks, the live table, the closing summary
- testnet_run.py   runs the testnet: model preparation, the live table, the summary
- plan_cmd.py      `plan`: the GPUs and memory per GPU a node needs (`learner/plan.py`)
- status_cmd.py    `status`: a node's status document (ops/status.py) as tables
- inspect_cmd.py   what `inspect` prints: a group file's header and statistics
- overrides.py     `--set key=value` and `FTIS_*` environment variables -> dotted config keys
- live.py          the round tables of join and testnet (rich), and the per-round log line
- progress.py      status lines and bars on the terminal (rich), plain lines elsewhere

The lab's commands (`lab/`, under their own heading in `--help`; they call `ftis_swarm/lab/`):

- lab/experiment.py   `experiment`: the pre-registered experiment, its table, statistics and plots
- lab/bench.py        the `bench` group and its benches of one machine:
                      `bench wire | learner | e2e | rollout | resume | soak | pipeline`
- lab/bench_swarm.py  `bench hostile | swarm | scale | reach | attacks | overlap`: the swarm under load and attack, standing's overlap
- lab/pilot.py        `bench pilot`: the experiment's pilot gate for learner B

Numeric ranges of flags are typer's `min=`/`max=`; the commands check the rest. The command
modules import `app.py`, never `main.py` (which imports them): no import circle; the node's
modules never import `lab/`. The only layer that prints; it may import every layer below (lab,
ops, node, and theirs). torch, transformers and hivemind are imported inside the commands, so
`ftis-node --help` answers at once.
"""
