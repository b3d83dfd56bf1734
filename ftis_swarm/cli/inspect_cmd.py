"""`ftis-node inspect FILE`: what a group file holds, or one sentence on why it is bad."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np

from ftis_swarm.errors import UserError
from ftis_swarm.wire import WireError, decode_group


def describe_group_file(path: Path, *, vocab_size: int | None = None) -> str:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        group = decode_group(data, vocab_size=vocab_size)
    except WireError as exc:
        raise UserError(f"{path} is not a valid v1 group: {exc}") from None
    created = dt.datetime.fromtimestamp(group.created_at, tz=dt.timezone.utc).isoformat(timespec="seconds")
    n_tok = group.num_completion_tokens
    lines = [
        f"group {group.group_id}  ({len(data)} bytes, {(len(data) - 4 * group.prompt_ids.size) / n_tok:.3f} bytes"
        f" per completion token)",
        f"  wire version    {group.version}",
        f"  run             {group.run_id}",
        f"  sender          {group.sender}",
        f"  model           {group.model_id}  (policy version {group.policy_version})",
        f"  created         {created}",
        f"  tokenizer       {group.tokenizer_fp}",
        f"  task / item     {group.task_id} / {group.item_id}",
        f"  temperature     {group.temperature:g}",
        f"  prompt tokens   {group.prompt_ids.size}",
        f"  completions     G = {group.G}, {n_tok} tokens",
        "",
        "  #   tokens   sum logp   mean logp    min logp",
    ]
    for i, lp in enumerate(group.logp_gen):
        lp64 = lp.astype(np.float64)
        lines.append(f"  {i:<3} {lp.size:>6} {lp64.sum():>10.3f} {lp64.mean():>11.4f} {lp64.min():>11.4f}")
    return "\n".join(lines)
