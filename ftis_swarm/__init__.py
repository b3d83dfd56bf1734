"""ftis-swarm: a peer-to-peer node for collaborative GRPO with F-TIS off-policy correction.

Layers, each importing only those below it (held by import-linter contracts in pyproject):

- cli       the `ftis-node` command (typer); heavy imports happen inside commands
- lab       what measures the product: the experiment, the benchmarks, the hostile peer (cli imports it alone)
- ops       around run directories: the local testnet, eval, report, summary
- node      the daemon: wires rollout, learner, peers and a swarm into rounds
- rollout   generation backends (transformers, vLLM) producing vertical groups
- learner   the F-TIS update on own and peers' groups; checkpoints
- swarm     the hivemind swarm: a facade over its dht, gossip and fetch wings; identity, bootstrap peer
- peers     what a node believes about peers (policy, intake, ledger) and the transport seam
- wire      the group format v1 (msgpack), tokenizer fingerprints
- tasks     prompts, ground truths and rewards (math-verify)
- metrics   the metrics sink interface (JSONL, Prometheus)
- models    resolving and loading models (hub ids, local paths, the embedded SmolLM2)
- core      pure tensor math: advantages, the F-TIS loss, chunked log-probs (docs/method.md)
- config    pydantic settings, ConfigError, the loss modes, the error formatter
- errors    UserError, the base of every error a user can cause

The product is everything outside `lab`.
"""

__version__ = "0.1.0"
