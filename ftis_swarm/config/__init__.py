"""Every setting of a node, as strict pydantic models (pydantic, the standard library and `ftis_swarm.errors` only).

A node's whole configuration is one `NodeConfig`: TOML file first, then `FTIS_*`
environment variables, then CLI flags and `--set key=value` on top (`ftis_swarm.cli`).
Each section is its own model so that the parts (core, wire, rollout, learner, swarm) take
only what they use. Unknown keys are errors, not silently ignored: a typo in a config file
must not fall back to a default without a word. Each key's docstring is its documentation,
and also its `Field.description`.

- base.py       Strict (every section's base), ConfigError (a `UserError`, see ftis_swarm.errors), and
                format_validation_error: the one way a pydantic error becomes one sentence
- wire.py       WireConfig (the decoder's limits) and T_MIN
- rollout.py    SamplingConfig
- learner.py    LearnerConfig, FTISConfig, LoRAConfig, and LOSS_MODES (what each loss mode does; the config,
                the CLI help and the experiment read it from here)
- transport.py  TransportConfig (swarm.transport: listening, peers, reach, relays, origins) and check_multiaddr
- swarm.py      SwarmConfig: the run, the identity, its puzzle and wire, and its sections (transport, records,
                fetch, holders, gossip); an old flat key (`swarm.ttl`) still loads into its section
                (`swarm.records.ttl`) with one WARNING sentence (`SwarmConfig.MOVED_KEYS`)
- ledger.py     LedgerConfig
- task_options.py TaskOptionsConfig (`[task_options]`: a `jsonl:` or `rg:` task's columns, split and verifier)
- node.py       NodeConfig, load_node_config, dump_node_config

Inside: node imports the others; swarm imports transport and wire; rollout imports wire; each
imports base. Everything is importable from here (`from ftis_swarm.config import SwarmConfig`).
"""

from ftis_swarm.config.base import ConfigError, Strict, format_validation_error
from ftis_swarm.config.learner import (
                                       FULL_LR,
                                       LORA_LR,
                                       LOSS_MODES,
                                       FTISConfig,
                                       LearnerConfig,
                                       LoRAConfig,
                                       LossMode,
                                       ModeSpec,
)
from ftis_swarm.config.ledger import LedgerConfig
from ftis_swarm.config.node import NodeConfig, dump_node_config, load_node_config, tomllib
from ftis_swarm.config.rollout import SamplingConfig
from ftis_swarm.config.swarm import (
                                       SWARM_SECTIONS,
                                       FetchConfig,
                                       GossipConfig,
                                       HoldersConfig,
                                       PuzzleConfig,
                                       RecordsConfig,
                                       SwarmConfig,
                                       moved_key_sentence,
)
from ftis_swarm.config.task_options import VERIFIERS, TaskOptionsConfig
from ftis_swarm.config.transport import TransportConfig, check_multiaddr
from ftis_swarm.config.wire import T_MIN, WireConfig

__all__ = [
    "FULL_LR", "LORA_LR", "LOSS_MODES", "SWARM_SECTIONS", "T_MIN", "ConfigError", "FTISConfig", "FetchConfig",
    "GossipConfig", "HoldersConfig", "LearnerConfig", "LedgerConfig", "LoRAConfig", "LossMode", "ModeSpec",
    "NodeConfig", "PuzzleConfig", "RecordsConfig", "SamplingConfig", "Strict", "SwarmConfig", "TaskOptionsConfig", "TransportConfig", "VERIFIERS",
    "WireConfig", "check_multiaddr", "dump_node_config", "format_validation_error", "load_node_config",
    "moved_key_sentence", "tomllib",
]
