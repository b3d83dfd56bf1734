"""The lab's commands of `ftis-node`: they measure the product and are no part of a node.

- experiment.py    `experiment` (ftis_swarm/lab/experiment/)
- bench.py         the `bench` group (`bench_app`, its `--json` and progress helpers) and the benches of
                   one machine: `wire | learner | e2e | rollout | resume | soak | pipeline`
- bench_swarm.py   `bench hostile | swarm | scale | reach | attacks | overlap` (ftis_swarm/lab/bench/)
- pilot.py         `bench pilot`: the experiment's pilot gate for learner B

They may import `cli.app` and `cli.overrides` and the layers below `cli`; `cli/main.py` alone
imports them. Each is listed in `ftis-node --help` under `app.LAB_PANEL`, after the node's.
"""
