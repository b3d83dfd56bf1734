"""A tiny model taught arith's answer form in a few supervised steps, so a tiny node learns something.

A random tiny model (`models.tiny`) never writes a number: every group's rewards are 0,
every advantage is 0, and GRPO takes no optimiser step, so a bench that compares weights
after a run (`bench resume`) would compare the initial weights. Sixty supervised steps on
arith's train items (prompt rendered with the chat template, then the sum and EOS) teach
it to answer with a number of one or two digits (`models/teach.py`); it is right about one
time in ten at T = 1, so most groups have mixed rewards and every round takes a step. Seeded,
one thread: the same arguments give the same model. `build_tiny_arith_model` is the Qwen
vocabulary's; `build_tiny_arith_smollm2` the same on SmolLM2's (a learner with another tokenizer).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from ftis_swarm.models.teach import TEACH_BATCH, TEACH_LR, TEACH_STEPS, teach_answer_form

__all__ = ["TEACH_BATCH", "TEACH_LR", "TEACH_STEPS", "arith_examples", "build_tiny_arith_model",
           "build_tiny_arith_smollm2"]


def arith_examples(tok: Any, *, n: int = 512, seed: int = 0) -> list[tuple[list[int], list[int]]]:
    """`n` arith train items: (the prompt through `tok`'s chat template, the sum's ids and `<|im_end|>`)."""
    from ftis_swarm.tasks import get_task

    task = get_task("arith")
    eos = int(tok.convert_tokens_to_ids("<|im_end|>"))
    return [(list(task.render_prompt(tok, it)), tok.encode(str(it.answer), add_special_tokens=False) + [eos])
            for it in task.sample(n, seed=seed, split="train")]


def build_tiny_arith_model(out_dir: Path, *, steps: int = TEACH_STEPS, seed: int = 0) -> Path:
    """Builds (once: an existing `out_dir/config.json` is reused) the taught tiny model on the Qwen vocabulary."""
    from ftis_swarm.models.tiny import build_tiny_qwen2

    return _taught(build_tiny_qwen2, Path(out_dir), steps=steps, seed=seed)


def build_tiny_arith_smollm2(out_dir: Path, *, steps: int = TEACH_STEPS, seed: int = 0) -> Path:
    """The same on SmolLM2's vocabulary and chat template (`models.tiny.build_tiny_smollm2`)."""
    from ftis_swarm.models.tiny import build_tiny_smollm2

    return _taught(build_tiny_smollm2, Path(out_dir), steps=steps, seed=seed)


def _taught(build: Callable[..., Path], out_dir: Path, *, steps: int, seed: int) -> Path:
    if (out_dir / "config.json").is_file():
        return out_dir
    # head size 32: vLLM's CPU attention takes it, so the same model serves `--backend vllm`
    base = build(out_dir.with_name(out_dir.name + "-random"), hidden_size=64, num_layers=1, num_heads=2, seed=seed)
    return teach_answer_form(base, out_dir, lambda tok: arith_examples(tok, seed=seed), steps=steps, seed=seed)
