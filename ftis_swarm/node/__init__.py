"""The node: the one place where rollout, learner and swarm meet, and where a round exists.

- daemon.py        Node: rounds of generate, publish, gather, learn, serve, log, checkpoint
- components.py    build_components: the parts from the config (model, learner, swarm, backend, sinks)
- preflight.py     what `join` checks before it writes or loads anything; task-dependent defaults
- intake.py        PeerIntake, Budget: which gathered peers' groups an update takes (caps, token budget)
- ledger.py        PeerLedger: per peer, counted faults with costs, credit, score, doubling bans
- health.py        UpdateHealth: failed updates in a row; `max_failed_updates` of them stop the node (exit 3)
- attacks.py       the hostile groups of issue 9, built from honest ones (tests and the bench)
- attack_bench.py  `ftis-node bench attacks`: what reaches an update; the forgery detector's figures
- testnet.py       the local testnet: a bootstrap peer and N `ftis-node join` processes
- e2e.py           `ftis-node bench e2e`: a swarm round against a solo round
- resume_bench.py  `ftis-node bench resume`: a lone node SIGKILLed N times against an undisturbed run
- soak_bench.py    `ftis-node bench soak`: RSS and open files of every process of a testnet, fitted growth
- tiny_arith.py    a tiny Qwen2 taught arith's answer form, so tiny nodes take optimiser steps
- evaluate.py      `ftis-node eval`: greedy pass@1
- report.py, summary.py  plots and the closing table of run directories

Imports below it: rollout, learner, swarm, wire, tasks, metrics, models, core, config, errors.
"""
