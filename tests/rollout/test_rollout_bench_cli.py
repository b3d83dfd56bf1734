"""`ftis-node bench rollout`: flags refused in one sentence, and a real run on a tiny model."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from ftis_swarm.cli.main import app


@pytest.mark.parametrize(
    "args, words",
    [
        (["--backend", "tgi"], "--backend must be transformers or vllm"),
        (["--group-size", "1"], "--group-size must be between 2 and 64"),
        (["--prompts", "0"], "--prompts must be between 1 and 256"),
        (["--temperature", "0"], "--temperature must be in (0, 10]"),
        (["--json", "/no/such/dir/x.json"], "does not exist"),
        (["--model", "gpt-17", "--backend", "transformers"], "unknown model 'gpt-17'"),
    ],
)
def test_bad_flags_exit_2_with_one_sentence(args, words) -> None:
    result = CliRunner().invoke(app, ["bench", "rollout", *args])
    assert result.exit_code == 2
    assert words in result.output and result.output.strip().count("\n") == 0


def test_a_run_reports_throughput_and_parity(tiny_dir, tmp_path) -> None:
    out = tmp_path / "rollout.json"
    result = CliRunner().invoke(app, [
        "bench", "rollout", "--model", str(tiny_dir), "--backend", "transformers", "--prompts", "2",
        "-G", "2", "--max-new-tokens", "5", "--temperature", "0.7", "--json", str(out),
    ])
    assert result.exit_code == 0, result.output
    assert "transformers (static cache)" in result.output and "tok/s" in result.output
    rows = json.loads(out.read_text())["rows"]
    assert [r["backend"] for r in rows] == ["transformers (static cache)", "transformers (dynamic cache)"]
    for r in rows:
        assert r["tokens"] == 2 * 2 * 5 and r["tokens_per_s"] > 0
        assert 0 <= r["max_abs_diff"] < 1e-4
