"""The node: the one place where rollout, learner and swarm are wired into rounds.

- daemon.py      `Node`: rounds of generate, publish, gather, score, learn, serve, log, checkpoint
- components.py  builds a node's parts from its config; keeps the rollout side serving the learner's weights
- preflight.py   what `join` checks before it writes or loads anything; task-dependent defaults
- testnet.py     a local testnet: a bootstrap peer and N nodes as processes on 127.0.0.1
- evaluate.py    greedy pass@1 of a model, checkpoint or adapter (`ftis-node eval`)
- summary.py     a run directory in a few numbers (the closing tables)
- report.py      the PNG curves of run directories (`ftis-node report`)
- e2e.py         the end-to-end bench's runs (a 2-node swarm against one node alone)

Imports below it: rollout, learner, swarm, wire, tasks, metrics, models, core, config, errors.
"""
