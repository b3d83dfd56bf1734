"""Configs validate, load from TOML or JSON, take flag overrides, and fail in one sentence."""

from __future__ import annotations

import logging

import pytest

from ftis_swarm.config import (
    SWARM_SECTIONS,
    ConfigError,
    FTISConfig,
    NodeConfig,
    SwarmConfig,
    dump_node_config,
    load_node_config,
)


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
                    '[swarm.transport]\npeers = ["/ip4/127.0.0.1/tcp/1/p2p/QmX"]\n')
    cfg = load_node_config(path, {"rounds": 9, "learner.lr": None, "sampling.temperature": 0.7})
    assert cfg.model == "Qwen2.5-1.5B" and cfg.rounds == 9 and cfg.learner.lr == 2e-6
    assert cfg.learner.ftis.mode == "tis" and cfg.sampling.temperature == 0.7
    assert cfg.swarm.transport.peers == ["/ip4/127.0.0.1/tcp/1/p2p/QmX"]
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


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_swarm_keys_live_in_sections_each_with_its_docstring():
    assert set(SwarmConfig.model_fields) == {"run_id", "identity", "puzzle", "wire", *SWARM_SECTIONS}
    assert all(SwarmConfig.model_fields[name].annotation is model for name, model in SWARM_SECTIONS.items())
    keys = {f"{name}.{key}" for name, model in SWARM_SECTIONS.items() for key in model.model_fields}
    assert len(keys) >= 50 and set(SwarmConfig.MOVED_KEYS.values()) == keys  # every old flat key has one home
    assert len(SwarmConfig.MOVED_KEYS) == len(keys)
    assert SwarmConfig.MOVED_KEYS["gossip"] == "gossip.enabled" and SwarmConfig.MOVED_KEYS["ttl"] == "records.ttl"
    undocumented = [k for k in keys if not SWARM_SECTIONS[k.split(".")[0]].model_fields[k.split(".")[1]].description]
    assert undocumented == [] and all(model.__doc__ for model in SWARM_SECTIONS.values())


def test_new_sectioned_keys_load_from_toml_env_and_set(tmp_path, caplog):
    from ftis_swarm.cli.overrides import env_overrides, set_overrides

    path = tmp_path / "node.toml"
    path.write_text('[swarm.fetch]\nmax_concurrent_fetches = 6\n[swarm.gossip]\nenabled = false\n')
    env = env_overrides(NodeConfig, {"FTIS_SWARM__RECORDS__TTL": "60", "FTIS_SWARM__HOLDERS__HOLD_BYTES": "0"})
    sets = set_overrides(NodeConfig, ["swarm.transport.port=4001", "swarm.gossip.rate=2.5"])
    with caplog.at_level(logging.WARNING):
        swarm = load_node_config(path, {**env, **sets}).swarm
    assert (swarm.fetch.max_concurrent_fetches, swarm.gossip.enabled, swarm.gossip.rate) == (6, False, 2.5)
    assert (swarm.records.ttl, swarm.holders.hold_bytes, swarm.transport.port) == (60.0, 0, 4001)
    assert _warnings(caplog) == []


def test_old_flat_keys_still_load_into_their_sections_with_one_deprecation_sentence(tmp_path, caplog):
    path = tmp_path / "node.toml"
    path.write_text('[swarm]\nttl = 300\ngossip = false\nmax_concurrent_fetches = 6\n')
    with caplog.at_level(logging.WARNING):
        swarm = load_node_config(path).swarm
    assert (swarm.records.ttl, swarm.gossip.enabled, swarm.fetch.max_concurrent_fetches) == (300.0, False, 6)
    assert _warnings(caplog) == ["config keys swarm.ttl, swarm.gossip and swarm.max_concurrent_fetches are deprecated: "
                                 "they are now swarm.records.ttl, swarm.gossip.enabled and "
                                 "swarm.fetch.max_concurrent_fetches (the old keys still work, for now)"]
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert SwarmConfig(port=4001, run_id="r").transport.port == 4001  # a keyword, as older code passes it
        assert SwarmConfig().model_copy(update={"poll_interval": 0.5}).fetch.poll_interval == 0.5
    assert _warnings(caplog) == [
        "config key swarm.port is deprecated: it is now swarm.transport.port (the old key still works, for now)",
        "config key swarm.poll_interval is deprecated: it is now swarm.fetch.poll_interval (the old key still works, "
        "for now)"]


def test_old_flat_keys_from_set_and_env_name_their_new_key(caplog):
    from ftis_swarm.cli.overrides import env_overrides, set_overrides

    with caplog.at_level(logging.WARNING):
        assert set_overrides(NodeConfig, ["swarm.max_concurrent_fetches=6", "swarm.gossip=false"]) == {
            "swarm.fetch.max_concurrent_fetches": 6, "swarm.gossip.enabled": False}
        assert env_overrides(NodeConfig, {"FTIS_SWARM__TTL": "60"}) == {"swarm.records.ttl": 60}
    warned = _warnings(caplog)
    assert warned[0] == ("config key swarm.max_concurrent_fetches is deprecated: it is now "
                         "swarm.fetch.max_concurrent_fetches (the old key still works, for now)")
    assert warned[2] == ("FTIS_SWARM__TTL is deprecated: it is now FTIS_SWARM__RECORDS__TTL (the old key still "
                         "works, for now)") and len(warned) == 3


def test_a_later_key_wins_whichever_spelling_and_two_at_odds_in_one_place_are_refused(tmp_path):
    path = tmp_path / "node.toml"
    path.write_text('[swarm]\nttl = 300\ngossip = false\n')
    swarm = load_node_config(path, {"swarm.records.ttl": 60, "swarm.gossip.rate": 2, "swarm.host": "10.0.0.1"}).swarm
    assert (swarm.records.ttl, swarm.gossip.enabled, swarm.gossip.rate, swarm.transport.host) == (
        60.0, False, 2.0, "10.0.0.1")
    path.write_text('[swarm]\nttl = 300\n[swarm.records]\nttl = 600\n')
    with pytest.raises(ConfigError) as err:
        load_node_config(path)
    assert str(err.value) == ("swarm: swarm.ttl is deprecated and swarm.records.ttl is also set, to another value: "
                              "keep swarm.records.ttl alone")
    with pytest.raises(ConfigError, match="swarm.fetch: max_fetches_per_peer=8 must be below"):
        load_node_config(None, {"swarm.fetch.max_fetches_per_peer": 8})  # a section's own check names the section
