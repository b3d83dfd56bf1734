"""Teaching a tiny model an answer form in a few supervised steps, so tiny nodes learn something.

A random tiny model (`models/tiny.py`) never writes a number: every group's rewards are 0,
every advantage is 0, and GRPO takes no optimiser step. `teach_answer_form` takes a few Adam
steps of cross-entropy on (prompt ids, answer ids + EOS) pairs, the loss on the answer tokens
only; the caller renders the pairs (with a task: `ops/taught.py` for `arith`, on the
Qwen vocabulary or any other). Seeded, one thread: the same arguments give the same model.
The result is written whole or not at all (a killed build is built again).
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import Any, Callable, Sequence

log = logging.getLogger(__name__)

TEACH_STEPS = 60
TEACH_BATCH = 32
TEACH_LR = 1e-2

Examples = Callable[[Any], Sequence[tuple[Sequence[int], Sequence[int]]]]
"""Given the model's tokenizer: (prompt ids, answer ids ending with the EOS) pairs to teach."""


def teach_answer_form(base: Path, out_dir: Path, examples: Examples, *, steps: int = TEACH_STEPS,
                      batch_size: int = TEACH_BATCH, lr: float = TEACH_LR, seed: int = 0) -> Path:
    """The model in folder `base` taught `examples` in `steps` steps, saved to `out_dir` (reused when it exists)."""
    out_dir = Path(out_dir)
    if (out_dir / "config.json").is_file():
        return out_dir
    import torch
    import torch.nn.functional as F

    from ftis_swarm.models.loading import load_model
    from ftis_swarm.models.quiet import no_progress_bars

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model, tok = load_model(str(base), dtype="fp32", device="cpu")
        rows = [(list(map(int, p)), list(map(int, a))) for p, a in examples(tok)]
        pad = int(rows[0][1][-1])
        gen = torch.Generator().manual_seed(seed)
        opt = torch.optim.Adam(model.parameters(), lr=lr)
        decoder, head = model.get_decoder(), model.get_output_embeddings()
        model.train()
        loss = torch.zeros(())
        for _ in range(steps):
            batch = [rows[i] for i in torch.randint(len(rows), (batch_size,), generator=gen).tolist()]
            width = max(len(p) + len(a) for p, a in batch)
            ids = torch.full((len(batch), width), pad, dtype=torch.long)  # (B, L)
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
        log.info("taught a tiny model an answer form: %d steps, last loss %.3f", steps, float(loss.detach()))
        tmp = out_dir.with_name(out_dir.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        with no_progress_bars():
            model.save_pretrained(tmp, safe_serialization=True)
            tok.save_pretrained(tmp)
        os.replace(tmp, out_dir)
    finally:
        torch.set_num_threads(threads)
    return out_dir
