"""A tiny Qwen2 taught arith's answer form in a few supervised steps, so a tiny node learns something.

A random tiny model (`models.tiny`) never writes a number: every group's rewards are 0,
every advantage is 0, and GRPO takes no optimiser step, so a bench that compares weights
after a run (`bench resume`) would compare the initial weights. Sixty supervised steps on
arith's train items (prompt rendered with the chat template, then the sum and EOS) teach
it to answer with a number of one or two digits; it is right about one time in ten at
T = 1, so most groups have mixed rewards and every round takes a step. Seeded, one thread:
the same arguments give the same model.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

log = logging.getLogger(__name__)

TEACH_STEPS = 60
TEACH_BATCH = 32
TEACH_LR = 1e-2


def build_tiny_arith_model(out_dir: Path, *, steps: int = TEACH_STEPS, seed: int = 0) -> Path:
    """Builds (once: an existing `out_dir/config.json` is reused) the taught tiny model in `out_dir`."""
    out_dir = Path(out_dir)
    if (out_dir / "config.json").is_file():
        return out_dir
    import torch
    import torch.nn.functional as F

    from ftis_swarm.models import load_model
    from ftis_swarm.models.quiet import no_progress_bars
    from ftis_swarm.models.tiny import build_tiny_qwen2
    from ftis_swarm.tasks import get_task

    # head size 32: vLLM's CPU attention takes it, so the same model serves `--backend vllm`
    base = build_tiny_qwen2(out_dir.with_name(out_dir.name + "-random"), hidden_size=64, num_layers=1, num_heads=2,
                            seed=seed)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model, tok = load_model(str(base), dtype="fp32", device="cpu")
        task = get_task("arith")
        eos = int(tok.convert_tokens_to_ids("<|im_end|>"))
        rows = [(list(task.render_prompt(tok, it)), tok.encode(str(it.answer), add_special_tokens=False) + [eos])
                for it in task.sample(512, seed=seed, split="train")]
        gen = torch.Generator().manual_seed(seed)
        opt = torch.optim.Adam(model.parameters(), lr=TEACH_LR)
        decoder, head = model.get_decoder(), model.get_output_embeddings()
        model.train()
        for _ in range(steps):
            batch = [rows[i] for i in torch.randint(len(rows), (TEACH_BATCH,), generator=gen).tolist()]
            width = max(len(p) + len(a) for p, a in batch)
            ids = torch.full((len(batch), width), eos, dtype=torch.long)  # (B, L)
            mask = torch.zeros((len(batch), width), dtype=torch.long)  # (B, L)
            rows_at, cols_at, targets = [], [], []
            for i, (prompt, answer) in enumerate(batch):
                seq = prompt + answer
                ids[i, : len(seq)] = torch.tensor(seq)  # (len(seq),)
                mask[i, : len(seq)] = 1  # (len(seq),)
                for j, token in enumerate(answer):  # the position before each answer token predicts it
                    rows_at.append(i)
                    cols_at.append(len(prompt) - 1 + j)
                    targets.append(token)
            hidden = decoder(input_ids=ids, attention_mask=mask).last_hidden_state  # (B, L, H)
            logits = head(hidden[torch.tensor(rows_at), torch.tensor(cols_at)])  # (M, V)
            loss = F.cross_entropy(logits, torch.tensor(targets))
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.eval()
        log.info("taught a tiny model arith's answer form: %d steps, last loss %.3f", steps, float(loss.detach()))
        tmp = out_dir.with_name(out_dir.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        with no_progress_bars():
            model.save_pretrained(tmp, safe_serialization=True)
            tok.save_pretrained(tmp)
        os.replace(tmp, out_dir)  # whole or not at all: a killed build is built again
    finally:
        torch.set_num_threads(threads)
    return out_dir
