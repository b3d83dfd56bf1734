"""The experiment (`ftis-node experiment`): two heterogeneous learners, alone and together (docs/experiment.md).

- config.py        ExperimentConfig: the NodeConfig both learners share, their overrides, the arms; an arm's NodeConfig
- arms.py          the runs of a grid (a fresh process per run), resume, the pilot's gate
- run.py           one run: one arm, one seed, two learners, each a real node on a loopback hub
- heldout.py       the one held-out evaluator: greedy pass@1 and sampled accuracy per item
- stats.py         the fixed paired statistics, claims and their verdicts
- paired_tests.py  paired tests over seeds: t-test, exact sign-flip, bootstrap interval, MDE
- report.py        the table and the plots of a grid
- pilot.py         the pilot gate: is a candidate learner B far enough from A for the correction to matter

The experiment trains with the node's own round (`node.daemon.Node`, its publish and learn
halves, on the `peers.loopback` transport); it never copies it.
"""
