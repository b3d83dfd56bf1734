"""Pure tensor math of the method (docs/method.md): imports torch and ftis_swarm.config, nothing else.

- groups.py    group_advantages: GRPO's per-group normalised advantage
- ftis.py      sample_terms (weights, filter, non-finite rule, decided once), policy_loss, ftis_loss,
               ftis_metrics
- logprobs.py  token_logprobs: per-token log-probs with the output head run chunk by chunk
"""
