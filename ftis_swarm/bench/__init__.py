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
- heldout.py         held-out accuracy per item: greedy pass@1 and sampled accuracy, pairable across arms
- pilot.py           the experiment's pilot gate: candidates for learner B, their accuracy and the F-TIS
                     weights of their samples under A (and A's under them)

The benches that run real node processes live in `ftis_swarm/node/` (this package may not
import it): `e2e.py` (a swarm round against a solo round), `attack_bench.py`,
`resume_bench.py` (exact resume under SIGKILLs) and `soak_bench.py` (memory and files over
hundreds of rounds). `hostile_bench.py` here runs swarm workers, not nodes.
"""
