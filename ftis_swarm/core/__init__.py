"""Pure tensor math of the method (METHOD.md): imports torch and ftis_swarm.config, nothing else.

- groups.py    group_advantages: GRPO's per-group normalised advantage
- ftis.py      truncated_weights, sample_kl, filtered_samples, ftis_loss and its metrics
- logprobs.py  token_logprobs: per-token log-probs with the output head run chunk by chunk
"""
