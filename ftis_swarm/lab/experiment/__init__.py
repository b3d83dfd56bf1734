"""The experiment (`ftis-node experiment`): two heterogeneous learners, alone and together (docs/experiment.md).

- config.py        ExperimentConfig: the NodeConfig both learners share, their overrides, the arms; an arm's NodeConfig
- arms.py          the runs of a grid (a fresh process per run), resume, the pilot's gate
- run.py           one run: one arm, one seed, two learners, each a real node on a loopback hub
- heldout.py       the experiment's held-out figures per item: greedy pass@1 (the node's evaluator, node/heldout.py) and sampled accuracy
- stats.py         the fixed paired tests of every arm against a base, at the end point (secondary comparisons)
- claims.py        the pre-registered claims C1, C2 and their verdict rules, collapses, standing, the a-priori MDE
- claims_tables.py the statistics as JSON (stats.json) and markdown (stats.md): claims first
- paired_tests.py  paired tests over seeds: t-test, exact sign-flip, bootstrap interval, MDE
- report.py        the table and the plots of a grid
- pilot.py         the pilot gate: is a candidate learner B far enough from A for the correction to matter
- sigma_pilot.py   the pre-registered design's pilot: the sweep of B = smollm2-bias<sigma>, its choice rule and gate
- specialist.py    issue 42's design: a warm-started `*` specialist beside a `+ -` learner, claims D1-D3, the seed rule

The experiment trains with the node's own round (`node.daemon.Node`, its publish and learn
halves, on the `peers.loopback` transport); it never copies it.
"""
