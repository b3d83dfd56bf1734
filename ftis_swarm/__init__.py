"""ftis-swarm: a peer-to-peer node for collaborative GRPO with F-TIS off-policy correction.

Layers, each importing only those below it (held by import-linter contracts in pyproject):

- cli       the `ftis-node` command (typer); heavy imports happen inside commands
- node      the daemon: wires rollout, learner and swarm into rounds; testnet, report
- bench     benchmarks and the paper's experiment in miniature
- rollout   generation backends (transformers, vLLM) producing vertical groups
- learner   the F-TIS update on own and peers' groups; checkpoints
- swarm     hivemind: identity, publish/gather, validators, bootstrap peer
- wire      the group format v1 (msgpack), tokenizer fingerprints
- tasks     prompts, ground truths and rewards (math-verify)
- metrics   the metrics sink interface (JSONL, Prometheus)
- models    resolving and loading models (hub ids, local paths, the embedded SmolLM2)
- core      pure tensor math: advantages, the F-TIS loss, chunked log-probs
- config    pydantic settings, ConfigError, the loss modes, the error formatter
- errors    UserError, the base of every error a user can cause
"""

__version__ = "0.1.0"
