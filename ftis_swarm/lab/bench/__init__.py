"""Benchmarks (`ftis-node bench ...`): each measures a baseline in the same run and prints ratios against it.

- wire.py            bytes per completion token; encode/decode throughput against a memory copy
- learner.py         an F-TIS step against a NoIS step; the loss alone; TRL's GRPO loss as the anchor
- logprob_memory.py  chunked vs naive per-token log-probs at a 150k vocabulary (fresh processes)
- dist.py            the FSDP2 learner on N ranks against one process: peak memory per rank, step time
- rollout.py         tokens/s of each installed rollout backend and log-prob parity with the learner
- swarm.py           publish-to-visible latency, groups/s and traffic per peer for N nodes, gossip against
                     polling (swarm_worker.py: one node)
- scale.py           what one node pays per round at 8 to 64 nodes, with a budget against fetching
                     everything, holders, bodies per stream (scale_worker.py: several nodes in one process;
                     scale_legs.py: publish-to-visible in legs at the node that chose a group)
- e2e.py             a swarm round of real `ftis-node join` processes against a solo round
- attacks.py         what of each hostile group reaches an update; how fast forgers are caught
                     (standing.py: a crowd of fresh identities against earned peers on the loopback hub;
                     crowd.py: the same crowd with daemons of their own over the real swarm)
- overlap.py         honest peers' share of tokens with pi_theta / pi_gen in [1/C, C], per model pair of the
                     testnet (smollm2-bias2 included), against issue 40's deflator and strike: what standing's q is
- resume.py          a lone node SIGKILLed N times against an undisturbed run (run_compare.py:
                     weights, optimiser and per-round logs compared)
- pipeline.py        the same lone node with max_staleness 0 against 1 on the same threads: round time,
                     samples learned per second, generate and learn alone with their shares, sync time
- soak.py            RSS and open files of every process of a testnet over hundreds of rounds
- hostile.py         a testnet under a hostile peer's floods (swarm workers, not nodes); identities.py:
                     what identities cost; storage_memory.py: what one record stored for others costs;
                     have_flood.py: one gather's loop work under a flood of haves, in-process
- fill.py            honest publishes, storage held and RSS before, during and after a storage fill by many
                     origins (`run_fill`; fillers that hold no one's records)
- nat_testbed.py     network namespaces behind real MASQUERADE routers (a public segment, two homes,
                     opt-in a control home whose router forwards its port)
- reach.py           groups between home nodes behind that NAT: relayed against client mode
- reach_bootstrap.py the swarm after its bootstrap's SIGKILL, newcomers through any live peer (loopback)
- reach_relay.py     the bootstrap's relay under a hostile relayed pair, honest homes beside it
- reach_punch.py     whether two relayed homes end up connected directly (hole punching), per testbed variant

A bench measures the product, never a copy of it: e2e, resume and soak start real
`ftis-node join` processes (`ops/testnet.py`). Imports below it: ops, node and every layer
under it; only the CLI imports the lab.
"""
