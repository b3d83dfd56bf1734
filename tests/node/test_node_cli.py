"""The CLI at its edges: bad flags and configs get one sentence and exit 2; eval and report work."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from ftis_swarm.cli.main import app

runner = CliRunner()


def one_error_line(result) -> str:
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    return lines[-1]


@pytest.mark.parametrize(
    "args, expected",
    [
        (["join", "--rounds", "0"], "error: rounds: Input should be greater than or equal to 1 (got 0)"),
        (["join", "--mode", "ppo"], "error: learner.ftis.mode"),
        (["join", "--temperature", "-1"], "error: sampling.temperature"),
        (["join", "--temperature", "0.01"], "error: sampling.temperature: Input should be greater than or equal to 0.05"),
        (["join", "--config", "/nonexistent.toml"], "error: cannot read config file /nonexistent.toml"),
        (["testnet", "--nodes", "0"], "error: --nodes must be between 1 and 16"),
        (["testnet", "--preset", "huge"], "error: --preset must be 'default' or 'tiny'"),
        (["report", "/nonexistent"], "error: no metrics.jsonl in /nonexistent"),
        (["eval", "--model", "x", "--limit", "0"], "error: --limit must be at least 1"),
    ],
)
def test_bad_input_is_one_sentence_and_exit_2(args, expected):
    assert one_error_line(runner.invoke(app, args)).startswith(expected)


def test_unknown_flag_is_a_usage_error_with_exit_2():
    result = runner.invoke(app, ["join", "--bogus"])
    assert result.exit_code == 2 and "No such option: --bogus" in result.output


@pytest.mark.slow
@pytest.mark.parametrize(
    "args, expected",
    [
        (["--model", "no-such-model-xyz"], "error: "),
        (["--task", "nosuchtask"], "error: "),
        (["--task", "math500"], "evaluation set with no train split"),
        (["--config", "accept.toml"], "task champ is an evaluation set"),
    ],
)
def test_unknown_model_or_task_fails_cleanly_in_a_real_process(tmp_path, args, expected):
    (tmp_path / "accept.toml").write_text('task = "arith"\naccept_tasks = ["arith", "champ"]\n')
    cmd = [sys.executable, "-m", "ftis_swarm.cli", "join", "--run-dir", str(tmp_path / "r"), "--host", "127.0.0.1",
           "--no-table"] + args
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    err = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ")]
    assert len(err) == 1 and "Traceback" not in proc.stderr
    assert expected in err[0] and (args[0] == "--config" or args[1] in err[0])


def test_print_config_resolves_flags_over_a_file(tmp_path):
    cfg = tmp_path / "node.toml"
    cfg.write_text('model = "Qwen2.5-1.5B"\n[learner]\nlr = 3e-6\n')
    result = runner.invoke(app, ["join", "--config", str(cfg), "--lora-rank", "8", "--peers", "/ip4/127.0.0.1/tcp/5",
                                 "--print-config"])
    out = json.loads(result.output)
    assert out["model"] == "Qwen2.5-1.5B" and out["learner"]["lr"] == 3e-6
    assert out["learner"]["lora"]["rank"] == 8 and out["swarm"]["transport"]["peers"] == ["/ip4/127.0.0.1/tcp/5"]


def test_inspect_prints_the_example_and_refuses_garbage(tmp_path):
    ok = runner.invoke(app, ["inspect", "proto/examples/group_v2_example.msgpack"])
    assert ok.exit_code == 0 and "G = 4, 24 tokens" in ok.output and "arith/v1/s0/42" in ok.output
    bad = tmp_path / "bad.msgpack"
    bad.write_bytes(b"\x81\xa1v\x03")
    assert "wire version 3 (another release)" in one_error_line(runner.invoke(app, ["inspect", str(bad)]))


@pytest.mark.slow
def test_eval_writes_pass_at_1_json(tmp_path, tiny_model_dir):
    out = tmp_path / "eval.json"
    result = runner.invoke(app, ["eval", "--model", str(tiny_model_dir), "--task", "arith", "--limit", "4",
                                 "--max-new-tokens", "4", "--json", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["items"] == 4 and data["task"] == "arith" and data["split"] == "test"
    assert 0.0 <= data["pass_at_1"] <= 1.0 and data["correct"] == round(data["pass_at_1"] * 4)
    assert f"pass@1 = {data['pass_at_1']:.4f}" in result.output


def test_eval_picks_transformers_on_cpu_and_vllm_only_when_asked() -> None:
    from ftis_swarm.ops.evaluate import pick_eval_backend
    from ftis_swarm.rollout.factory import vllm_installed

    assert pick_eval_backend("auto") == ("transformers", "cpu")  # no CUDA here: auto never starts vLLM on CPU
    assert pick_eval_backend("transformers") == ("transformers", "cpu")
    if vllm_installed():
        assert pick_eval_backend("vllm") == ("vllm", "cpu")
    with pytest.raises(ValueError, match="backend must be"):
        pick_eval_backend("tpu")


def test_join_nproc_per_node_reruns_the_same_command_under_torchrun_without_the_flag():
    import sys

    from ftis_swarm.cli.join_run import torchrun_argv

    argv = torchrun_argv(["join", "--model", "m", "--nproc-per-node", "2", "--rounds", "3", "--nproc-per-node=2"], 2)
    assert argv[:5] == [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    assert argv[5:] == ["-m", "ftis_swarm.cli", "join", "--model", "m", "--rounds", "3"]
    bad = runner.invoke(app, ["join", "--nproc-per-node", "0", "--print-config"])
    assert bad.exit_code == 2
