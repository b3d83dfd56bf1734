"""No progress bars from transformers or the hub while a model converts, downloads or loads.

Library code prints no bars (docs: progress only in the CLI): a GGUF conversion alone draws
about 30 lines of tqdm on a log that is not a terminal. The CLI shows one status line of
its own around the whole step instead.
"""

from __future__ import annotations

import functools
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def no_progress_bars() -> Iterator[None]:
    """Silences transformers' and huggingface_hub's tqdm bars inside the block, restoring them after.

    transformers' GGUF reader draws its bar with a plain `tqdm` that ignores its own switch,
    so that module's `tqdm` is swapped for one with `disable=True` for the block.
    """
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars
    from transformers import modeling_gguf_pytorch_utils as gguf_utils
    from transformers.utils import logging as hf_logging

    hf_was_on, hub_was_on = hf_logging.is_progress_bar_enabled(), not are_progress_bars_disabled()
    gguf_tqdm = getattr(gguf_utils, "tqdm", None)
    hf_logging.disable_progress_bar()
    disable_progress_bars()
    if gguf_tqdm is not None:
        gguf_utils.tqdm = functools.partial(gguf_tqdm, disable=True)
    try:
        yield
    finally:
        if gguf_tqdm is not None:
            gguf_utils.tqdm = gguf_tqdm
        if hf_was_on:
            hf_logging.enable_progress_bar()
        if hub_was_on:
            enable_progress_bars()
