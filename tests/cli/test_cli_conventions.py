"""The conventions every command keeps: any config key from `--set` or `FTIS_*`, `--version`,
`--log-level`, defaults that suit the task, checks before anything is written, one name for
one thing, and every mistake one sentence with exit status 2."""

from __future__ import annotations

import json
import socket

import pytest
from typer.testing import CliRunner

from ftis_swarm.cli.app import LAB_PANEL
from ftis_swarm.cli.main import app
from ftis_swarm.cli.overrides import env_overrides, parse_value, set_overrides
from ftis_swarm.config import LORA_LR, LOSS_MODES, ConfigError, LearnerConfig, NodeConfig, SwarmConfig

runner = CliRunner()


def config_of(args: list[str], env: dict[str, str] | None = None) -> dict:
    result = runner.invoke(app, ["join", *args, "--print-config"], env=env)
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def one_error(args: list[str], env: dict[str, str] | None = None) -> str:
    result = runner.invoke(app, args, env=env)
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert result.exit_code == 2, result.output
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in result.output, result.output
    assert "Value error" not in lines[0]
    return lines[0]


def test_any_key_from_env_flags_and_set_in_that_order(tmp_path):
    path = tmp_path / "node.toml"
    path.write_text('rounds = 2\n[learner]\nlr = 3e-6\n[learner.lora]\nrank = 4\n')
    env = {"FTIS_ROUNDS": "3", "FTIS_LEARNER__FTIS__C": "4", "FTIS_SWARM__TRANSPORT__PEERS": "/ip4/10.0.0.1/tcp/7,/ip4/10.0.0.2/tcp/8",
           "FTIS_DATA_DIR": "/not/a/config/key"}
    cfg = config_of(["--config", str(path)], env)
    assert cfg["rounds"] == 3 and cfg["learner"]["ftis"]["C"] == 4.0 and cfg["learner"]["lr"] == 3e-6
    assert cfg["swarm"]["transport"]["peers"] == ["/ip4/10.0.0.1/tcp/7", "/ip4/10.0.0.2/tcp/8"]
    cfg = config_of(["--config", str(path), "--rounds", "5", "--set", "learner.ftis.g=12.5", "--set",
                     "swarm.records.ttl=300", "--set", 'swarm.transport.announce=["/ip4/1.2.3.4/tcp/9"]',
                     "--set", "learner.lora=none"], env)
    assert cfg["rounds"] == 5 and cfg["learner"]["ftis"]["g"] == 12.5 and cfg["swarm"]["records"]["ttl"] == 300.0
    assert cfg["swarm"]["transport"]["announce"] == ["/ip4/1.2.3.4/tcp/9"] and cfg["learner"]["lora"] is None
    assert config_of(["--rounds", "5", "--set", "rounds=7"], env)["rounds"] == 7
    # text keys stay text, even when they look like numbers
    assert config_of(["--set", "swarm.run_id=2024", "--set", "model=smollm2-mini"])["swarm"]["run_id"] == "2024"


def test_print_config_shows_the_swarm_in_its_sections():
    swarm = config_of(["--port", "4001", "--set", "swarm.fetch.max_concurrent_fetches=6"])["swarm"]
    assert list(swarm) == ["run_id", "identity", "puzzle", "wire", "transport", "records", "fetch", "holders", "gossip"]
    assert swarm["transport"]["port"] == 4001 and swarm["fetch"]["max_concurrent_fetches"] == 6
    assert swarm["records"]["ttl"] == 600.0 and swarm["gossip"] == {"enabled": True, "rate": 4.0, "burst": 64}


def test_print_keys_lists_every_key_with_its_default_and_its_docstring():
    from ftis_swarm.cli.overrides import all_keys

    result = runner.invoke(app, ["join", "--print-keys"])
    assert result.exit_code == 0, result.output
    listed = [ln.split(" = ")[0] for ln in result.output.splitlines() if " = " in ln and not ln.startswith("[")]
    sections = [ln.split("]")[0][1:] for ln in result.output.splitlines() if ln.startswith("[")]
    assert sorted(listed + sections) == sorted(all_keys(NodeConfig)) and len(set(listed)) == len(listed)
    assert ("swarm.records.ttl = 600.0  # Seconds a published group stays in the DHT; older groups are dropped on "
            "gather.") in result.output.splitlines()
    assert "swarm.transport" in sections and "swarm.gossip" in sections


def test_values_parse_by_the_type_of_their_key():
    assert set_overrides(NodeConfig, ["learner.ftis.c=3", "threads=none", "swarm.transport.client_mode=true"]) == {
        "learner.ftis.C": 3, "threads": None, "swarm.transport.client_mode": True}
    assert parse_value("1e-5", float) == 1e-5 and parse_value("007", str) == "007"
    assert env_overrides(NodeConfig, {"FTIS_SAMPLING__TEMPERATURE": "0.5", "FTIS_CACHE_DIR": "/x", "HOME": "/h"}) == {
        "sampling.temperature": 0.5}


@pytest.mark.parametrize(
    "args, env, words",
    [
        (["--set", "learner.ftis.CC=3"], None, "--set learner.ftis.CC: learner.ftis.CC is not a config key; did you mean learner.ftis.C?"),
        (["--set", "rounds"], None, "--set expects KEY=VALUE"),
        (["--set", "rounds.x=1"], None, "rounds is a value, not a section"),
        (["--set", "rounds=many"], None, "rounds: Input should be a valid integer"),
        ([], {"FTIS_LERNER__LR": "1"}, "environment variable FTIS_LERNER__LR: lerner is not a config key; did you mean learner?"),
    ],
)
def test_unknown_keys_and_bad_values_are_one_sentence(args, env, words):
    assert words in one_error(["join", *args, "--print-config"], env)


def test_bootstrap_takes_swarm_keys_from_the_environment_and_refuses_bad_ones_in_one_sentence():
    assert "swarm.puzzle.bits: Input should be less than or equal to 32" in one_error(
        ["bootstrap", "--host", "127.0.0.1"], {"FTIS_SWARM__PUZZLE__BITS": "99"})
    assert "did you mean swarm.puzzle.bits?" in one_error(
        ["bootstrap", "--host", "127.0.0.1"], {"FTIS_SWARM__PUZZLE__BIT": "3"})


def test_version_and_log_level():
    from ftis_swarm import __version__

    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"ftis-node {__version__}"
    assert "--log-level must be one of debug, info, warning, error, not 'loud'" in one_error(
        ["--log-level", "loud", "join", "--print-config"])
    assert runner.invoke(app, ["--log-level", "debug", "join", "--print-config"]).exit_code == 0
    assert "--log-level must be one of" in one_error(["join", "--print-config"], env={"FTIS_LOG_LEVEL": "loud"})


@pytest.mark.parametrize("task, tokens", [("arith", 64), ("gsm8k", 512), ("gsm_symbolic", 512), ("math500", 1024)])
def test_max_new_tokens_suits_the_task_unless_given(task, tokens, tmp_path):
    assert config_of(["--task", task])["sampling"]["max_new_tokens"] == tokens
    assert config_of(["--task", task, "--max-new-tokens", "100"])["sampling"]["max_new_tokens"] == 100
    path = tmp_path / "node.toml"
    path.write_text("[sampling]\nmax_new_tokens = 90\n")
    assert config_of(["--task", task, "--config", str(path)])["sampling"]["max_new_tokens"] == 90


def test_lora_gets_a_lora_learning_rate_unless_one_is_given():
    assert config_of([])["learner"]["lr"] == LearnerConfig().lr == 1e-6
    assert config_of(["--lora-rank", "8"])["learner"]["lr"] == LORA_LR == 1e-5
    assert config_of(["--lora-rank", "8", "--lr", "3e-4"])["learner"]["lr"] == 3e-4
    assert config_of(["--set", "learner.lora.rank=8", "--set", "learner.lr=2e-6"])["learner"]["lr"] == 2e-6


@pytest.mark.parametrize(
    "args, words",
    [
        (["--model", "gpt-17"], "unknown model 'gpt-17'"),
        (["--task", "nosuchtask"], "unknown task 'nosuchtask'; known tasks: arith"),
        (["--task", "../etc"], "task: task name '../etc' is not a plain name"),
        (["--peers", "127.0.0.1:31337"], "swarm.transport.peers: '127.0.0.1:31337' is not a multiaddr like /ip4/"),
        (["--peers", "/ip4/300.1.1.1/tcp/5"], "'300.1.1.1' is not an ip4 address"),
        (["--announce", "/ip4/1.2.3.4/tcp/70000"], "port 70000 is outside 1-65535"),
        (["--port", "9100", "--metrics-port", "9100"], "metrics_port and swarm.transport.port are both 9100"),
        (["--set", "wandb_project=ftis"], "wandb_project needs the wandb package, which is not installed"),
    ],
)
def test_task_model_peers_ports_sinks_checked_under_print_config(args, words):
    assert words in one_error(["join", *args, "--print-config"])


def test_a_folder_that_is_no_checkpoint_is_refused_before_loading(tmp_path):
    assert f"model folder '{tmp_path}' has no config.json" in one_error(["join", "--model", str(tmp_path),
                                                                          "--print-config"])


def test_nothing_is_written_until_the_config_and_the_machine_check_out(tmp_path):
    run = tmp_path / "run"
    assert "unknown model" in one_error(["join", "--model", "gpt-17", "--run-dir", str(run)])
    assert "cannot read the peers file" in one_error(["join", "--peers-file", str(tmp_path / "none"), "--run-dir", str(run)])
    bad = tmp_path / "peers.txt"
    bad.write_text("# bootstrap\n/ip4/127.0.0.1/tcp/5/p2p/QmX\nnot-an-address\n")
    assert f"peers file {bad}: 'not-an-address' is not a multiaddr" in one_error(
        ["join", "--peers-file", str(bad), "--run-dir", str(run)])
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        words = f"metrics_port (--metrics-port): port {port} on 127.0.0.1 is in use by another program"
        assert words in one_error(["join", "--metrics-port", str(port), "--run-dir", str(run)])
        assert "swarm.transport.port (--port)" in one_error(["join", "--host", "127.0.0.1", "--port", str(port),
                                                   "--run-dir", str(run)])
    assert not run.exists()


def test_old_spellings_are_hidden_aliases_and_not_both_at_once(tmp_path):
    assert "--workdir is the old name of --run-dir; give only --run-dir" in one_error(
        ["testnet", "--run-dir", str(tmp_path / "a"), "--workdir", str(tmp_path / "b")])
    assert "--prompts must be at least 1 (got 0)" in one_error(["bench", "e2e", "--prompts", "0"])
    assert "--round-deadline must be more than 0 seconds" in one_error(["bench", "e2e", "--round-deadline", "0"])
    assert "--json: folder" in one_error(["eval", "--model", "x", "--out", str(tmp_path / "no" / "x.json")])
    for command in (["testnet"], ["experiment"], ["eval"], ["report"], ["bench", "e2e"]):
        shown = runner.invoke(app, [*command, "--help"]).output
        assert "--workdir" not in shown and "--eval-items" not in shown and "--deadline " not in shown
        assert "--out " not in shown and "--out\n" not in shown


@pytest.mark.parametrize(
    "args, words",
    [
        (["--temperature", "-1"], "sampling.temperature: Input should be greater than or equal to 0.05"),
        (["--mode", "ppo"], "learner.ftis.mode"),
        (["--task", "nosuch"], "unknown task 'nosuch'"),
        (["--set", "learner.ftis.CC=1"], "did you mean learner.ftis.C?"),
        (["--sibling", "gpt-17"], "unknown model 'gpt-17'"),
        (["--preset", "tiny", "--sibling", "smollm2-mini"], "--sibling sets the third node of the default preset"),
    ],
)
def test_testnet_checks_what_every_node_will_get_before_starting_any(args, words, tmp_path):
    assert words in one_error(["testnet", "--run-dir", str(tmp_path / "t"), *args])
    assert not (tmp_path / "t").exists()


def test_loss_modes_are_listed_from_their_one_definition():
    result = runner.invoke(app, ["join", "--help-modes"])
    assert result.exit_code == 0
    for name, spec in LOSS_MODES.items():
        assert f"  {name:<7} {spec.summary}" in result.output
    assert set(LOSS_MODES) == set(NodeConfig.model_fields["learner"].default_factory().ftis.model_fields["mode"]
                                  .annotation.__args__)


def test_validation_errors_read_as_one_sentence_without_pydantic_prefixes():
    with pytest.raises(ConfigError) as err:
        from ftis_swarm.config import load_node_config

        load_node_config(None, {"task": "a b", "rounds": 0})
    assert str(err.value) == "task: task name 'a b' is not a plain name like 'arith' or 'gsm8k', nor jsonl:PATH or rg:NAME; and 1 more problem"
    from pydantic import ValidationError

    from ftis_swarm.config import format_validation_error

    with pytest.raises(ValidationError) as verr:
        SwarmConfig(records={"max_clock_skew": -1})
    assert format_validation_error(verr.value, as_flags=True) == (
        "--max-clock-skew: Input should be greater than or equal to 0 (got -1)")


@pytest.mark.parametrize(
    "args, words",
    [
        (["testnet", "--nodes", "17"], "--nodes must be between 1 and 16 (got 17)"),
        (["bench", "swarm", "--nodes", "4", "--nodes", "1"], "--nodes must be between 2 and 32 (got 1)"),
        (["bench", "e2e", "-G", "1"], "--group-size must be at least 2 (got 1)"),
        (["bench", "pilot", "--temperature", "0.01"], "--temperature must be between 0.05 and 10 (got 0.01)"),
        (["bench", "hostile", "--storage-mib", "4096.5"], "--storage-mib must be between 1 and 4,096 (got 4096.5)"),
        (["plan", "--model", "Qwen2.5-1.5B", "--seq-len", "1"], "--seq-len must be at least 2 (got 1)"),
        (["eval", "--model", "x", "--batch-size", "many"], "Invalid value for '--batch-size': Input should be a valid integer"),
        (["eval"], "Missing option '--model'"),
    ],
)
def test_flags_typer_refuses_are_one_sentence_naming_the_flag_and_its_range(args, words):
    assert one_error(args).startswith(f"error: {words}")


def test_a_flag_at_the_edge_of_its_range_is_accepted():
    result = runner.invoke(app, ["plan", "--model", "Qwen2.5-1.5B", "--seq-len", "2", "--micro-batch", "1",
                                 "--vllm-gpus", "0", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["model"] == "Qwen2.5-1.5B"


def test_help_lists_the_nodes_commands_first_and_the_labs_under_their_own_heading():
    shown = runner.invoke(app, ["--help"]).output
    node, lab = shown.split("Commands:\n")[1].split(f"{LAB_PANEL}:\n")
    names = lambda text: [ln.split()[0] for ln in text.splitlines() if ln.startswith("  ") and ln.strip()]  # noqa: E731
    assert names(node) == ["inspect", "bootstrap", "join", "testnet", "eval", "report", "plan", "status"]
    assert names(lab) == ["experiment", "bench"]
    bench = runner.invoke(app, ["bench", "--help"]).output
    for command in ("wire", "learner", "e2e", "rollout", "resume", "soak", "pipeline", "hostile", "swarm", "scale",
                    "reach", "attacks", "pilot"):
        assert f"\n  {command} " in bench, command
