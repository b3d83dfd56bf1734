"""Which model a node runs: names, the embedded default, loading, and tiny test models.

- registry.py  resolve_model / ModelNotFoundError: short names, local folders, hub ids
- loading.py   load_model / load_tokenizer: a resolved model in a dtype on a device
- smollm2.py   the embedded SmolLM2-135M-Instruct (GGUF converted once) and its sibling with layers dropped
- cache.py     cache_dir / cached_checkpoint: $FTIS_CACHE_DIR, built once, renamed into place
- tiny.py      build_tiny_qwen2: seeded tiny Qwen2 with the real Qwen tokenizer (tests, benches)
- shapes.py    ModelShape: the Qwen2.5 family's config shapes as data (memory plans, no download)

Imports below it: core and config only (torch and transformers are imported inside functions).
"""

from ftis_swarm.models.loading import load_model, load_tokenizer
from ftis_swarm.models.registry import ModelNotFoundError, resolve_model

__all__ = ["ModelNotFoundError", "load_model", "load_tokenizer", "resolve_model"]
