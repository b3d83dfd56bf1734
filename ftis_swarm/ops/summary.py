"""What a run directory says about a node, in a few numbers (the closing table of testnet and join).

"no signal" is the share of samples whose group's rewards were all equal (docs/method.md's
`frac_zero_adv`: advantage 0, nothing to learn, nothing to filter); "filtered" the share
with a non-zero advantage that the filter zeroed (`frac_filtered`); both over all samples
of all rounds. "banned" lists the peers the node banned (`banned_peers`, short ids).
"held-out" is the greedy pass@1 on the node's held-out set (`heldout_acc`, node/heldout.py)
at its first evaluation (round 0, before any update) and its last; "peer samples used /
fetched" the peers' samples that reached the gradient against those the node fetched
(node/peer_yield.py), and "zero-signal MB" the bytes of the peers' groups that carried none.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from ftis_swarm.metrics import read_jsonl


def _mean(rows: list[dict], key: str) -> Optional[float]:
    vals = [r[key] for r in rows if isinstance(r.get(key), (int, float))]
    return sum(vals) / len(vals) if vals else None


def _weighted(rows: list[dict], key: str, weight: str) -> Optional[float]:
    num = den = 0.0
    for r in rows:
        w, v = r.get(weight), r.get(key)
        if isinstance(w, (int, float)) and isinstance(v, (int, float)) and w > 0:
            num, den = num + v * w, den + w
    return num / den if den else None


def summarize_run(run_dir: Path) -> dict[str, Any]:
    """Rounds, reward early and late, peers' groups used, no signal / filtered, bans, time split."""
    lines = list(read_jsonl(run_dir / "metrics.jsonl")) if (run_dir / "metrics.jsonl").exists() else []
    rows = [r for r in lines if r.get("round")]  # round 0's line is the evaluation before any update
    evals = [r for r in lines if isinstance(r.get("heldout_acc"), (int, float))]
    cfg_path = run_dir / "config.json"
    cfg = json.loads(cfg_path.read_text()) if cfg_path.exists() else {}
    lora = (cfg.get("learner") or {}).get("lora")
    half = max(1, len(rows) // 2)
    return {
        "run_dir": str(run_dir),
        "model": cfg.get("model", "?") + (f" + LoRA r{lora['rank']}" if lora else ""),
        "rounds": len(rows),
        "last_round": rows[-1]["round"] if rows else 0,
        "reward_first_half": _mean(rows[:half], "reward"),
        "reward_second_half": _mean(rows[half:], "reward") if len(rows) > 1 else None,
        "peer_groups": sum(int(r.get("peer_groups") or 0) for r in rows),
        "peer_samples_used": sum(int(r.get("offpolicy_used") or 0) for r in rows),
        "peer_samples_fetched": sum(int(r.get("peer_samples_fetched") or 0) for r in rows),
        "zero_signal_bytes": sum(int(r.get("zero_signal_bytes") or 0) for r in rows),
        "heldout_start": evals[0]["heldout_acc"] if evals else None,
        "heldout_start_round": evals[0]["round"] if evals else None,
        "heldout_end": evals[-1]["heldout_acc"] if len(evals) > 1 else None,
        "heldout_end_round": evals[-1]["round"] if len(evals) > 1 else None,
        "heldout_items": evals[-1].get("heldout_items") if evals else None,
        "time_eval": sum(float(r.get("time_eval") or 0.0) for r in lines),
        "frac_no_signal": _weighted(rows, "frac_zero_adv", "sequences"),
        "frac_filtered": _weighted(rows, "frac_filtered", "sequences"),
        "banned_peers": sorted({p for r in rows for p in (r.get("banned_peers") or [])}),
        "frac_peer_tokens_over_C": _weighted(rows, "frac_offpolicy_over_C", "offpolicy_sequences"),
        "published": sum(int(r.get("published") or 0) for r in rows),
        "publish_failed": sum(int(r.get("publish_failed") or 0) for r in rows),
        "time_generate": _mean(rows, "time_generate"),
        "time_gather": _mean(rows, "time_gather"),
        "time_learn": _mean(rows, "time_learn"),
        "time_round": _mean(rows, "time_round"),
    }


def format_summary(summaries: list[dict[str, Any]]) -> str:
    cols = [("node", lambda s: Path(s["run_dir"]).name), ("model", lambda s: s["model"]),
            ("rounds", lambda s: s["rounds"]), ("reward 1st/2nd half", lambda s: f"{_f(s['reward_first_half'])} / "
                                                 f"{_f(s['reward_second_half'])}"),
            ("held-out start -> end", _heldout),
            ("peer groups", lambda s: s["peer_groups"]),
            ("peer samples used / fetched", lambda s: f"{s['peer_samples_used']} / {s['peer_samples_fetched']}"),
            ("zero-signal MB", lambda s: f"{s['zero_signal_bytes'] / 1e6:.2f}"),
            ("no signal", lambda s: _f(s["frac_no_signal"])), ("filtered", lambda s: _f(s["frac_filtered"])),
            ("peer tokens w>C", lambda s: _f(s["frac_peer_tokens_over_C"])),
            ("banned", lambda s: ", ".join(s["banned_peers"]) or "-"),
            ("gen/gather/learn s", lambda s: f"{_f(s['time_generate'], 1)}/{_f(s['time_gather'], 1)}/"
                                             f"{_f(s['time_learn'], 1)}")]
    table = [[name for name, _ in cols]] + [[str(fn(s)) for _, fn in cols] for s in summaries]
    widths = [max(len(row[i]) for row in table) for i in range(len(cols))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) for row in table)


def _heldout(s: dict[str, Any]) -> str:
    """`0.120 (r0) -> 0.310 (r5)`: the first evaluation and the last."""
    if s["heldout_start"] is None:
        return "-"
    start = f"{s['heldout_start']:.3f} (r{s['heldout_start_round']})"
    return start if s["heldout_end"] is None else f"{start} -> {s['heldout_end']:.3f} (r{s['heldout_end_round']})"


def _f(x: Optional[float], digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"
