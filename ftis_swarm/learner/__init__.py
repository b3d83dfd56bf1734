"""The local learner: the F-TIS update of this node's own model or LoRA adapter.

- batch.py       ScoredGroup (a group with locally recomputed rewards), padding, micro-batches
- learner.py     Learner.update: logp_old, METHOD.md metrics, PPO epochs; apply_lora
- rewards.py     score_groups: rewards recomputed by this node's verifier from the decoded text
- checkpoint.py  CheckpointManager: atomic, verified checkpoints; resume from the last complete one
"""
