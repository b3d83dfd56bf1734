"""The round tables of `join` and `testnet`: the latest rounds stay on screen however long the run.

`join` shows its last rounds, as many as fit the terminal; `testnet` one row per node with
its latest round and a sparkline of its reward so far. "no signal" (docs/method.md's
`frac_zero_adv`: samples whose group's rewards were all equal, so their advantage is 0)
stands apart from "filtered" (`frac_filtered`: samples with a non-zero advantage that the
filter zeroed); "banned" counts the peers this node has banned (`banned_peers`); "reach" is
how peers reach it (`reach_mode`: public, relayed or client, with `+N` after N live switches
of an `auto` node, docs/swarm.md Reach); "held-out" is the greedy pass@1 on the node's held-out
set (`heldout_acc`, node/heldout.py) in the rounds evaluated, and in the testnet's table the first
evaluation against the latest (round 0's, before any update, first). Where
reward and accuracy coincide (binary rewards: a sample's reward is 1 when correct, else 0),
one column shows both, headed `reward=acc` (`columns_for`). Without a terminal, each round is
one plain line instead (`round_line`).
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

from rich.table import Table


def _num(digits: int) -> Callable[[Any], str]:
    return lambda v: f"{v:.{digits}f}" if isinstance(v, (int, float)) and not isinstance(v, bool) else "-"


def _reach(record: dict[str, Any]) -> str:
    mode, switches = record.get("reach_mode"), record.get("reach_switches") or 0
    if not isinstance(mode, str):
        return "-"
    return f"{mode}+{switches}" if switches else mode


def _count(v: Any) -> str:
    if isinstance(v, (list, tuple)):
        return str(len(v))
    return str(v) if isinstance(v, int) else "-"


COLUMNS: tuple[tuple[str, str, Callable[[Any], str]], ...] = (
    ("round", "round", _count),
    ("reward", "reward", _num(3)),
    ("accuracy", "accuracy", _num(3)),
    ("held-out", "heldout_acc", _num(3)),
    ("no signal", "frac_zero_adv", _num(2)),
    ("filtered", "frac_filtered", _num(2)),
    ("w>C", "frac_truncated", _num(2)),
    ("peer groups", "peer_groups", _count),
    ("banned", "banned_peers", _count),
    ("reach", "", _reach),
    ("loss", "loss", _num(4)),
    ("gen s", "time_generate", _num(1)),
    ("gather s", "time_gather", _num(1)),
    ("learn s", "time_learn", _num(1)),
)
"""(header, record key, format) of a round's cells; an empty key formats the whole record."""
_SPARKS = "▁▂▃▄▅▆▇█"
Columns = tuple[tuple[str, str, Callable[[Any], str]], ...]


def _same_as_reward(record: dict[str, Any]) -> bool:
    acc, reward = record.get("accuracy"), record.get("reward")
    return acc is None or (reward is not None and abs(acc - reward) < 1e-9)


def columns_for(records: Sequence[dict[str, Any]]) -> Columns:
    """`COLUMNS`, with accuracy folded into a `reward=acc` column when every record's two are equal
    (and dropped, the reward kept, when no record has an accuracy)."""
    if not all(_same_as_reward(r) for r in records):
        return COLUMNS
    folded = "reward=acc" if any(r.get("accuracy") is not None for r in records) else "reward"
    return tuple((folded if key == "reward" else head, key, fmt) for head, key, fmt in COLUMNS if key != "accuracy")


def cells(record: dict[str, Any], columns: Columns = COLUMNS) -> list[str]:
    return [fmt(record.get(key) if key else record) for _, key, fmt in columns]


def round_line(record: dict[str, Any], *, prefix: str = "") -> str:
    """One round as `header=value` pairs, for logs (round 0: the held-out evaluation before any update)."""
    if record.get("round") == 0:
        return prefix + f"round=0  held-out={_num(3)(record.get('heldout_acc'))}  (before any update)"
    columns = tuple(c for c in columns_for([record]) if c[1] != "heldout_acc" or "heldout_acc" in record)
    pairs = "  ".join(f"{head.replace(' ', '_').replace('=', '_')}={cell}" for (head, _, _), cell in zip(columns, cells(record, columns)))
    return prefix + pairs


def rounds_table(title: str, records: Sequence[dict[str, Any]], *, max_rows: int, earlier: int = 0) -> Table:
    """The last `max_rows` rounds (older ones leave at the top, the header stays).

    `earlier`: rounds before `records` that the caller no longer holds (counted in the caption).
    """
    hidden = max(0, len(records) - max_rows)
    shown = list(records)[hidden:]
    columns = columns_for(shown)
    table = Table(*(head for head, _, _ in columns), title=title)
    if hidden + earlier:
        table.caption = f"{hidden + earlier} earlier round{'s' * (hidden + earlier > 1)} in metrics.jsonl"
    for record in shown:
        table.add_row(*cells(record, columns))
    return table


def sparkline(values: list[Optional[float]], width: int = 16) -> str:
    """The last `width` values in [0, 1] as block characters (a gap for a missing one)."""
    out = []
    for v in values[-width:]:
        out.append(" " if v is None else _SPARKS[min(len(_SPARKS) - 1, max(0, int(v * len(_SPARKS))))])
    return "".join(out)


def heldout_trend(records: Sequence[dict[str, Any]]) -> str:
    """The first held-out accuracy in `records` against the latest: `0.120->0.310` (one value: itself)."""
    accs = [r["heldout_acc"] for r in records if isinstance(r.get("heldout_acc"), (int, float))]
    if not accs:
        return "-"
    return f"{accs[0]:.3f}" if len(accs) == 1 else f"{accs[0]:.3f}->{accs[-1]:.3f}"


def nodes_table(title: str, nodes: Sequence[tuple[str, str, int, Sequence[dict[str, Any]], str]], *,
                caption: Optional[str] = None) -> Table:
    """One row per node: `(name, model, rounds planned, its latest records, state)`; the sparkline shows 16."""
    columns = columns_for([records[-1] for _, _, _, records, _ in nodes if records])
    table = Table("node", "model", "state", "reward by round", *(head for head, _, _ in columns), title=title,
                  caption=caption)
    heldout = [i for i, (_, key, _) in enumerate(columns) if key == "heldout_acc"]
    for name, model, planned, records, state in nodes:
        last = records[-1] if records else {}
        row = cells(last, columns)
        row[0] = f"{last.get('round', 0)}/{planned}"
        for i in heldout:
            row[i] = heldout_trend(records)
        rounds = [r for r in records if r.get("round")]  # round 0 is the evaluation before any update
        table.add_row(name, model, state, sparkline([r.get("reward") for r in rounds]), *row)
    return table
