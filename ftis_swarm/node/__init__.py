"""The node: the daemon, the one place where rollout, learner, peers and a swarm meet, and where a round exists.

- daemon.py        Node: rounds of generate, publish, gather, learn, serve, log, checkpoint
- rollouts.py      the round's own groups: the prompts drawn (seeded by node seed and round), rendered, generated
- learning.py      learn_round: the learning half of a round (score, label own / peer / stale, update,
                   charge and credit the ledger, serve)
- scoring.py       what a node accepts from a group (task, split, item, prompt), and rewards recomputed by
                   this node's verifier from the decoded text
- serving.py       Serving: the rollout backend serves the learner's weights under the learner's version
- pipeline.py      Pipeline: with max_staleness k >= 1, round r + k generates (in its own process on CPU)
                   while round r learns; stale own groups, too-old ones dropped, groups ahead checkpointed
- components.py    build_components: the parts from the config (model, learner, swarm, backend, sinks)
- ranks.py         a node under torchrun: rank 0 is the node, the other ranks follow as learner shards
- preflight.py     what `join` checks before it writes or loads anything; task-dependent defaults
- status.py        StatusBoard: the node's status document (rounds, peers' standing, disk), status.json
                   every round; status_page.py: StatusServer, the page (status_page.html) and /status.json
- health.py        UpdateHealth: failed updates in a row; `max_failed_updates` of them stop the node (exit 3)
- heldout.py       the product's one greedy evaluator (greedy_pass_at_1, heldout_items: `ftis-node eval` and
                   the experiment call it too) and HeldoutEval, a node's held-out curve (round 0, every
                   `eval_every` rounds, the last round), checkpointed
- peer_yield.py    what the swarm gave a round: peers' samples through the gradient against those fetched,
                   bytes of the groups that carried none

Imports below it: rollout, learner, swarm, peers, wire, tasks, metrics, models, core, config, errors.
Imported by ops, lab and cli.
"""
