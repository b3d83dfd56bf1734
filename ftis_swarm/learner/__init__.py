"""The local learner: the F-TIS update of this node's own model or LoRA adapter.

- batch.py        ScoredGroup (a group with locally recomputed rewards), padding, micro-batches
- learner.py      Learner.update: admission, logp_old, the forgery check, docs/method.md metrics, PPO epochs
                  (a non-finite step skipped); apply_lora
- forgery.py      ForgeryDetector: per peer, a Hoeffding bound on the mean truncated weight and the overlap
                 tests of standing (ratios in [1/C, C]), when standing began (the aggregate cap)
- distributed.py  ShardedLearner: the same update on FSDP2 ranks (torchrun); init_ranks, follow/stop
- sharding.py     how a model is cut for FSDP2 (LogprobRoot), mixed precision, activation checkpointing
- state.py        weights and optimiser state any process count loads (by parameter name)
- plan.py         plan_memory: the GPUs and memory per GPU a node needs, from the choices above
- checkpoint.py   CheckpointManager: atomic, verified checkpoints; resume from the last complete one
                  (`latest`, `round_of`, `load`)

Imports below it: wire, models, core, config and errors (never rollout, swarm or node);
torch, peft, safetensors and numpy; never hivemind or vllm (import-linter contracts).
"""
