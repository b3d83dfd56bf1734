"""What a node believes about its peers, and the seam a transport plugs into. No hivemind here.

- policy.py    PeerPolicy (the ledger as a transport sees it: allows, score) and ALLOW_ALL
- intake.py    PeerIntake, Budget: which gathered peers' groups an update takes (caps, token budget)
- copies.py    content_key, logp_key: when two peers' groups are the same content, and a copy from a coincidence
- cherry.py    MixedShareCheck: publishers whose groups are mixed beyond what their pass rate explains
- draw.py      strangers_in_turns: the strangers' draw (origins in turn, then identities), swarm's and intake's
- faults.py    every fault reason as a named constant, and its price (only what a peer signed costs)
- ledger.py    PeerLedger: per peer, counted faults with costs, credit, score, bans (and their causes)
- protocol.py  the transport seam: Swarm (what a node calls), SwarmFactory, PublishResult
- loopback.py  LoopbackHub, LoopbackSwarm: the in-process transport (wire bytes, the swarm's checks)

Imports below it: wire, tasks, metrics, models, core, config, errors. Imported by swarm,
learner (the fault reasons it raises), node and above.
"""
