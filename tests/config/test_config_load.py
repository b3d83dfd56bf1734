"""Configs validate, load from TOML or JSON, take flag overrides, and fail in one sentence."""

from __future__ import annotations

import pytest

from ftis_swarm.config import ConfigError, FTISConfig, NodeConfig, dump_node_config, load_node_config


def test_defaults_are_the_method_defaults():
    f = FTISConfig()
    assert (f.mode, f.C, f.g, f.eps, f.filter_rule, f.filter_scope, f.kl_estimator) == (
        "ftis", 2.0, 50.0, 0.2, "or", "offpolicy", "rlogr")
    assert f.truncates and f.filters
    assert not FTISConfig(mode="vis").truncates and not FTISConfig(mode="tis").filters


@pytest.mark.parametrize("bad", [dict(mode="ppo"), dict(C=0), dict(eps=1.5), dict(filter_rule="xor"),
                                 dict(kl_estimator="k2"), dict(unknown=1)])
def test_invalid_ftis_values_are_rejected(bad):
    with pytest.raises(ValueError):
        FTISConfig(**bad)


def test_toml_then_overrides(tmp_path):
    path = tmp_path / "node.toml"
    path.write_text('model = "Qwen2.5-1.5B"\nrounds = 7\n[learner]\nlr = 2e-6\n[learner.ftis]\nmode = "tis"\n'
                    '[swarm]\npeers = ["/ip4/127.0.0.1/tcp/1/p2p/QmX"]\n')
    cfg = load_node_config(path, {"rounds": 9, "learner.lr": None, "sampling.temperature": 0.7})
    assert cfg.model == "Qwen2.5-1.5B" and cfg.rounds == 9 and cfg.learner.lr == 2e-6
    assert cfg.learner.ftis.mode == "tis" and cfg.sampling.temperature == 0.7
    assert cfg.swarm.peers == ["/ip4/127.0.0.1/tcp/1/p2p/QmX"]
    again = tmp_path / "config.json"
    again.write_text(dump_node_config(cfg))
    assert load_node_config(again) == cfg


@pytest.mark.parametrize(
    "text, overrides, message",
    [
        ("rounds = 0\n", {}, "rounds: Input should be greater than or equal to 1 (got 0)"),
        ("[learner]\nlrr = 1\n", {}, "learner.lrr: Extra inputs are not permitted"),
        ("rounds = \n", {}, "does not parse"),
        ("", {"sampling.group_size": 100}, "exceeds swarm.wire.max_group_size"),
        ("", {"learner.ftis.mode": "bogus"}, "learner.ftis.mode"),
        ("", {"task": "../etc"}, "not a plain name"),
    ],
)
def test_bad_configs_give_one_sentence(tmp_path, text, overrides, message):
    path = tmp_path / "node.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_node_config(path, overrides)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_node_config(tmp_path / "nope.toml")
    assert isinstance(NodeConfig(), NodeConfig)
