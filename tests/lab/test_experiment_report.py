"""The experiment's table and plots on synthetic results: sampled accuracy beside greedy, a line per seed."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from ftis_swarm.lab.experiment.report import eval_matrix, format_table, plot_all, seed_lines, summary_rows


def ev(acc: float, sampled: float | None) -> dict:
    out = {"accuracy": acc, "items": 10, "greedy": [1] * round(10 * acc) + [0] * (10 - round(10 * acc)),
           "digest": "d"}
    if sampled is not None:
        out.update(sampled=[round(4 * sampled)] * 10, samples=4, sampled_accuracy=sampled)
    return out


def result(*, sampled: bool) -> dict:
    runs = []
    for arm, gain in (("solo", 0.0), ("solo-2x", 0.1), ("vertical-ftis", 0.2)):
        for seed in (0, 1, 2):
            recs = [{"round": r, "learner": n, "reward": 0.1 * r + gain + 0.05 * seed, "bytes_sent": 0.0,
                     "ess@1": 0.5 if arm == "vertical-ftis" else None, "mean_weight@1": 0.9}
                    for r in (1, 2, 3, 4) for n in ("A", "B")]
            end = 0.3 + gain + 0.1 * seed
            runs.append({"arm": arm, "seed": seed, "rounds": recs,
                         "evals": [{"round": 4, "A": ev(end, end / 2 if sampled else None),
                                    "B": ev(end - 0.1, (end - 0.1) / 2 if sampled else None)}]})
    cfg = {"arms": ["solo", "solo-2x", "vertical-ftis"], "seeds": [0, 1, 2], "node": {"rounds": 4}, "eval_rounds": [4],
           "learners": [{"model": "a", "learner": {"lr": 1e-5}},
                        {"model": "b", "learner": {"lr": 1e-4, "lora": {"rank": 8}}}]}
    start = {"round": 0, "A": ev(0.3, 0.15 if sampled else None), "B": ev(0.2, 0.1 if sampled else None)}
    return {"config": cfg, "start": start, "runs": runs}


def test_table_shows_sampled_accuracy_beside_greedy_only_when_present():
    res = result(sampled=True)
    row = next(r for r in summary_rows(res) if r["arm"] == "vertical-ftis" and r["learner"] == "A")
    assert row["heldout_end"] == pytest.approx((0.6, 0.1))
    assert row["sampled_end"] == pytest.approx((0.3, 0.05)) and row["sampled_start"] == pytest.approx((0.15, 0.0))
    table = format_table(res)
    assert "| held-out end | sampled start | sampled end |" in table
    assert "| 0.60 ± 0.10 | 0.15 ± 0.00 | 0.30 ± 0.05 |" in table
    old = format_table(result(sampled=False))
    assert "sampled" not in old and "| 0.60 ± 0.10 |" in old
    _, acc = eval_matrix(res["runs"][:3], res["start"], "B", "sampled_accuracy")
    assert acc.shape == (3, 2) and acc[:, 0] == pytest.approx([0.1] * 3)


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_plot_all_writes_the_pngs_with_a_sampled_row_when_present(tmp_path):
    paths = plot_all(result(sampled=True), tmp_path)
    assert [p.name for p in paths] == ["experiment_reward.png", "experiment_heldout.png", "experiment_weights.png"]
    for path in paths:
        assert 5_000 < path.stat().st_size < 400_000
    assert _png_size(paths[1].read_bytes()) == (900, 612)  # 10 x 6.8 inches at 90 dpi: greedy and sampled rows


def test_seed_lines_draws_each_seed_thin_and_the_mean_thick():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ys = np.array([[0.0, 1.0, np.nan], [1.0, 3.0, np.nan]])  # (seeds, points); the last point has no seed
    seed_lines(ax, np.arange(3), ys, "red", "arm")
    lines = ax.get_lines()
    assert len(lines) == 3 and [ln.get_linewidth() for ln in lines] == [0.7, 0.7, 2.2]
    mean = lines[-1].get_ydata()
    assert mean[:2] == pytest.approx([0.5, 2.0]) and np.isnan(mean[2]) and lines[-1].get_label() == "arm"
    plt.close(fig)
