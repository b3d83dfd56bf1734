"""Pure tensor math of the method (docs/method.md): imports torch and ftis_swarm.config, nothing else.

- groups.py    group_advantages: GRPO's per-group normalised advantage
- ftis.py      sample_terms (weights, filter, non-finite rule, decided once), policy_loss, ftis_loss,
               ftis_metrics
- chunks.py    align_chunks, chunk_log_ratios, chunk_gen_logp: character-aligned chunks for peers with
               another tokenizer; check_alignment, check_reencoding (AlignmentError)
- logprobs.py  token_logprobs: per-token log-probs with the output head run chunk by chunk
"""
