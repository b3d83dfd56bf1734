"""The local learner: the F-TIS update of this node's own model or LoRA adapter.

- batch.py       ScoredGroup (a group with locally recomputed rewards), padding, micro-batches
- learner.py     Learner.update: admission, logp_old, the forgery check, METHOD.md metrics, PPO epochs
                 (a non-finite step skipped); apply_lora
- forgery.py     ForgeryDetector: per peer, a Hoeffding bound on the mean truncated weight
- rewards.py     score_groups: what a learner accepts (task, split, item, prompt), and rewards
                 recomputed by this node's verifier from the decoded text
- checkpoint.py  CheckpointManager: atomic, verified checkpoints; resume from the last complete one
"""
