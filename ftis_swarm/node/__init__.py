"""The node: the one place where rollout, learner and swarm meet, and where a round exists.

- daemon.py        Node: rounds of generate, publish, gather, learn, serve, log, checkpoint
- rollouts.py      the round's own groups: the prompts drawn (seeded by node seed and round), rendered, generated
- learning.py      learn_round: the learning half of a round (score, label own / peer / stale, update,
                   charge and credit the ledger, serve); the daemon, the experiment and `bench attacks` call it
- serving.py       Serving: the rollout backend serves the learner's weights under the learner's version
- pipeline.py      Pipeline: with max_staleness k >= 1, round r + k generates (in its own process on CPU)
                   while round r learns; stale own groups, too-old ones dropped, groups ahead checkpointed; in-memory sync
- components.py    build_components: the parts from the config (model, learner, swarm, backend, sinks)
- ranks.py         a node under torchrun: rank 0 is the node, the other ranks follow as learner shards
- preflight.py     what `join` checks before it writes or loads anything; task-dependent defaults
- intake.py        PeerIntake, Budget: which gathered peers' groups an update takes (caps, token budget)
- ledger.py        PeerLedger: per peer, counted faults with costs, credit, score, doubling bans
- health.py        UpdateHealth: failed updates in a row; `max_failed_updates` of them stop the node (exit 3)
- attacks.py       the hostile groups of issue 9, built from honest ones (tests and `bench attacks`)
- testnet.py       the local testnet: a bootstrap peer and N `ftis-node join` processes
- evaluate.py      `ftis-node eval`: greedy pass@1
- report.py, summary.py  plots and the closing table of run directories

Imports below it: rollout, learner, swarm, wire, tasks, metrics, models, core, config, errors.
Imported by bench and cli only; the benches that run node processes live in bench/.
"""
