"""The round tables of join and testnet, and the closing summary: what they show and keep on screen."""

from __future__ import annotations

import json
import re
from collections import deque

from rich.console import Console

from ftis_swarm.cli.live import nodes_table, round_line, rounds_table, sparkline
from ftis_swarm.ops.summary import format_summary, summarize_run


def render(table) -> str:
    console = Console(record=True, width=240, color_system=None)
    console.print(table)
    return console.export_text()


def cols(line: str) -> list[str]:
    return [c.strip() for c in re.split("[│┃]", line)[1:-1]]


def record(r: int, **extra) -> dict:
    return {"round": r, "reward": r / 100, "frac_zero_adv": 0.75, "frac_filtered": 0.125, "peer_groups": 2,
            "sequences": 8, **extra}


def test_join_table_keeps_the_latest_rounds_however_long_the_run():
    text = render(rounds_table("node", [record(r) for r in range(1, 51)], max_rows=10))
    rounds = [int(cols(line)[0]) for line in text.splitlines() if len(cols(line)) > 5 and cols(line)[0].isdigit()]
    assert rounds == list(range(41, 51))
    assert "40 earlier rounds in metrics.jsonl" in text and "no signal" in text and "filtered" in text
    # the caller keeps only the latest rounds (a bounded deque): the ones it dropped still count as earlier
    kept = deque((record(r) for r in range(1, 51)), maxlen=20)
    text = render(rounds_table("node", kept, max_rows=10, earlier=30))
    rounds = [int(cols(line)[0]) for line in text.splitlines() if len(cols(line)) > 5 and cols(line)[0].isdigit()]
    assert rounds == list(range(41, 51)) and "40 earlier rounds in metrics.jsonl" in text


def test_testnet_table_has_a_row_per_node_with_no_signal_filtered_and_bans():
    a = [record(r) for r in range(1, 4)]
    b = [record(1, banned_peers=["peerXYZ1", "peerXYZ2"], frac_zero_adv=None)]
    text = render(nodes_table("testnet", [("node-0-full", "smollm2-135m", 6, a, "running"),
                                          ("node-1-lora", "smollm2-135m", 6, b, "done")]))
    rows = {cols(line)[0]: cols(line) for line in text.splitlines() if "node-" in line}
    header = cols(next(ln for ln in text.splitlines() if "reward by round" in ln))
    full, lora = (dict(zip(header, rows[n])) for n in ("node-0-full", "node-1-lora"))
    assert full["round"] == "3/6" and full["no signal"] == "0.75" and full["filtered"] == "0.12"
    assert full["banned"] == "-" and full["state"] == "running" and len(full["reward by round"]) == 3
    assert lora["round"] == "1/6" and lora["banned"] == "2" and lora["no signal"] == "-"


def test_the_reach_column_shows_the_mode_and_live_switches():
    nodes = [("home-public", "tiny", 4, [record(2, reach_mode="public")], "running"),
             ("home-switched", "tiny", 4, [record(2, reach_mode="relayed", reach_switches=1)], "running"),
             ("no-swarm", "tiny", 4, [record(2)], "running")]
    text = render(nodes_table("testnet", nodes))
    header = cols(next(ln for ln in text.splitlines() if "reward by round" in ln))
    rows = {cols(ln)[0]: dict(zip(header, cols(ln))) for ln in text.splitlines() if cols(ln)[:1] and "-" in cols(ln)[0]}
    assert [rows[n]["reach"] for n in ("home-public", "home-switched", "no-swarm")] == ["public", "relayed+1", "-"]
    assert "reach=relayed+1" in round_line(record(3, reach_mode="relayed", reach_switches=1))


def test_a_round_as_a_log_line_names_no_signal_and_filtered_apart():
    line = round_line(record(7, banned_peers=["p1"]), prefix="  node-0 ")
    assert line.startswith("  node-0 round=7  reward=0.070")
    assert "no_signal=0.75" in line and "filtered=0.12" in line and "banned=1" in line


def test_reward_and_accuracy_share_a_column_only_where_they_coincide():
    binary = [record(r, accuracy=r / 100) for r in range(1, 4)]
    header = cols(next(ln for ln in render(rounds_table("node", binary, max_rows=10)).splitlines() if "round" in ln))
    assert header[:4] == ["round", "reward=acc", "held-out", "no signal"] and "accuracy" not in header
    assert round_line(binary[0]).startswith("round=1  reward_acc=0.010  no_signal=")
    graded = binary + [record(4, accuracy=1.0)]  # a partial-credit reward: 0.04 against accuracy 1
    text = render(rounds_table("node", graded, max_rows=10))
    header = cols(next(ln for ln in text.splitlines() if "round" in ln))
    assert header[:3] == ["round", "reward", "accuracy"]
    last = dict(zip(header, cols(next(ln for ln in text.splitlines() if cols(ln)[:1] == ["4"]))))
    assert last["reward"] == "0.040" and last["accuracy"] == "1.000"
    nodes = render(nodes_table("testnet", [("a", "m", 4, graded, "running"), ("b", "m", 4, binary, "done")]))
    assert "accuracy" in nodes  # one node's differ: both columns for every row


def test_report_ticks_rounds_at_whole_numbers_and_draws_the_heldout_curve_from_round_0(tmp_path):
    from ftis_swarm.ops.report import PANELS, draw_runs

    lines = [{"round": 0, "heldout_acc": 0.2, "heldout_acc_arith_mix": 0.1}]
    lines += [record(r, accuracy=r / 100, time_round=1.0) for r in (1, 2)]
    lines += [record(3, accuracy=0.03, time_round=1.0, heldout_acc=0.4, heldout_acc_arith_mix=0.3)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    fig = draw_runs([tmp_path])
    drawn = [ax for ax in fig.axes if ax.lines]
    assert len(drawn) == 4 and len(PANELS) == 6  # reward, held-out, peer groups, round time
    assert "accuracy" not in [key for key, _ in PANELS]  # with a binary reward it is the reward's curve again
    heldout = next(ax for ax in drawn if ax.get_title().startswith("held-out"))
    curves = {line.get_label(): list(zip(*line.get_data())) for line in heldout.lines}
    assert curves == {tmp_path.name: [(0, 0.2), (3, 0.4)], f"{tmp_path.name} arith_mix": [(0, 0.1), (3, 0.3)]}
    for ax in drawn:
        fig.canvas.draw()
        ticks = [t for t in ax.get_xticks() if 1 <= t <= 3]
        assert ticks and all(float(t).is_integer() for t in ticks), ticks


def test_heldout_shows_in_both_tables_and_the_summary_from_round_0_to_the_last(tmp_path):
    lines = [{"round": 0, "time": 1.0, "policy_version": 0, "heldout_acc": 0.12, "heldout_items": 50}]
    lines += [record(r) for r in (1, 2)] + [record(3, heldout_acc=0.31, heldout_items=50)]
    assert round_line(lines[0], prefix="  n ") == "  n round=0  held-out=0.120  (before any update)"
    assert "held-out=0.310" in round_line(lines[-1]) and "held-out" not in round_line(lines[1])  # evaluated rounds
    text = render(nodes_table("testnet", [("node-0", "m", 3, lines, "done")]))
    header = cols(next(ln for ln in text.splitlines() if "reward by round" in ln))
    row = dict(zip(header, cols(next(ln for ln in text.splitlines() if "node-0" in ln))))
    assert row["held-out"] == "0.120->0.310" and len(row["reward by round"]) == 3  # round 0 has no reward
    joined = render(rounds_table("node", lines[1:], max_rows=10))
    header = cols(next(ln for ln in joined.splitlines() if "round" in ln))
    assert [dict(zip(header, cols(ln)))["held-out"] for ln in joined.splitlines() if cols(ln)[:1] in (["2"], ["3"])] \
        == ["-", "0.310"]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    s = summarize_run(tmp_path)
    assert s["rounds"] == 3 and s["last_round"] == 3 and s["reward_first_half"] == 0.01  # round 0 is no round
    assert "0.120 (r0) -> 0.310 (r3)" in format_summary([s])


def test_sparkline_scales_rewards_and_marks_missing_ones():
    assert sparkline([0.0, 0.5, 1.0, None]) == "▁▅█ "
    assert len(sparkline([0.5] * 40)) == 16


def test_summary_weights_no_signal_and_filtered_by_samples_and_lists_bans(tmp_path):
    rows = [record(1, sequences=8, frac_zero_adv=1.0, frac_filtered=0.0),
            record(2, sequences=24, frac_zero_adv=0.5, frac_filtered=0.25, banned_peers=["peerB"]),
            record(3, sequences=8, frac_zero_adv=0.0, frac_filtered=0.5, banned_peers=["peerB", "peerA"])]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    s = summarize_run(tmp_path)
    assert s["frac_no_signal"] == (8 * 1.0 + 24 * 0.5) / 40 and s["frac_filtered"] == (24 * 0.25 + 8 * 0.5) / 40
    assert s["banned_peers"] == ["peerA", "peerB"]
    text = format_summary([s])
    assert "no signal" in text and "peerA, peerB" in text and "0.500" in text
