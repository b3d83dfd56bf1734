"""Which model a node runs: names, the embedded default, loading, and tiny test models.

- registry.py  resolve_model / check_model_name / portable_model_name / ModelNotFoundError: short
               names, local folders, hub ids
- loading.py   load_model / load_tokenizer: a resolved model in a dtype on a device
- smollm2.py   the embedded SmolLM2-135M-Instruct (GGUF converted once) and its siblings with layers dropped
               (SIBLINGS: mini, slim, slim27, slim26)
- logit_bias.py smollm2-bias<sigma>: SmolLM2 with a fixed seeded logit bias (digits, EOS, specials exempt),
               added in a forward hook on the head by load_model (the experiment's peer with a dial)
- teach.py     teach_answer_form: a tiny model taught an answer form in a few supervised steps (CPU)
- hub.py       check_model_reachable / hub_source: a hub model cached, reachable, or neither (then one sentence in seconds)
- cache.py     cache_dir / cached_checkpoint: $FTIS_CACHE_DIR, built once, renamed into place
- quiet.py     no_progress_bars: transformers' and the hub's tqdm bars off while models load
- tiny.py      build_tiny_qwen2, build_tiny_smollm2: seeded tiny models on the real Qwen or SmolLM2 tokenizer (tests, benches)
- shapes.py    ModelShape: the Qwen2.5 family's config shapes as data (memory plans, no download)

Imports below it: core, config and errors only (torch and transformers are imported inside functions).
"""

from ftis_swarm.models.hub import check_model_reachable
from ftis_swarm.models.loading import load_model, load_tokenizer
from ftis_swarm.models.registry import (
                                        ModelNotFoundError,
                                        check_model_name,
                                        hub_id_of,
                                        portable_model_name,
                                        resolve_model,
)

__all__ = ["ModelNotFoundError", "check_model_name", "check_model_reachable", "hub_id_of", "load_model",
           "load_tokenizer", "portable_model_name", "resolve_model"]

