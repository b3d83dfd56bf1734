"""Benchmarks and the paper's experiment in miniature (`ftis-node bench ...`, `ftis-node experiment`).

Every benchmark measures a baseline in the same process and prints ratios against it.

- wire_bench.py      bytes per completion token; encode/decode throughput against a memory copy
- learner_bench.py   an F-TIS step against a NoIS step; the loss alone; TRL's GRPO loss as the anchor
- logprob_memory.py  chunked vs naive per-token log-probs at a 150k vocabulary (fresh processes)
- dist_bench.py      the FSDP2 learner on N ranks against one process: peak memory per rank, step time
- rollout_bench.py   tokens/s of each installed rollout backend and log-prob parity with the learner
- swarm_bench.py     publish-to-visible latency, groups/s and traffic per peer for N nodes, gossip against
                     polling (swarm_worker.py: one node)
- experiment*.py     two heterogeneous learners, alone and together, per mode; vertical vs horizontal
                     (experiment_report.py: table and plots; experiment_stats.py: the fixed paired
                     statistics, claims and verdicts)
- paired_tests.py    paired tests over seeds: t-test, exact sign-flip, bootstrap interval, MDE
- e2e.py             a swarm round of real `ftis-node join` processes against a solo round
- attack_bench.py    what of each hostile group reaches an update; how fast forgers are caught
- resume_bench.py    a lone node SIGKILLed N times against an undisturbed run (run_compare.py:
                     weights, optimiser and per-round logs compared)
- pipeline_bench.py  the same lone node with max_staleness 0 against 1 on the same threads: round time,
                     samples learned per second, generate and learn alone with their shares, sync time
- soak_bench.py      RSS and open files of every process of a testnet over hundreds of rounds
- hostile_bench.py   a testnet under a hostile peer's floods (swarm workers, not nodes)
- tiny_arith.py      a tiny Qwen2 taught arith's answer form, so tiny nodes take optimiser steps
- heldout.py         held-out accuracy per item: greedy pass@1 and sampled accuracy, pairable across arms
- pilot.py           the experiment's pilot gate: candidates for learner B, their accuracy and the F-TIS
                     weights of their samples under A (and A's under them)

The bench measures the product, never a copy of it: the experiment trains with the node's
own round (`node/rollouts.py` draws and generates, `node/learning.py` scores, labels,
updates and serves); e2e, resume and soak start real `ftis-node join` processes (`node/testnet.py`).
Imports below it: node and every layer under it; only the CLI imports this package.
"""
