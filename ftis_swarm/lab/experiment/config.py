"""The experiment's settings, expressed as the nodes it runs: a base `NodeConfig`, and per learner its overrides.

A learner of the experiment is a node, so what it trains with is a `NodeConfig` field, and
it exists there once, with NodeConfig's bounds: `node` is the `NodeConfig` both learners
share (the task, rounds, prompts a round, sampling, the learner's dtype and micro-batch,
`max_staleness`), and `learners` holds A's and B's overrides on it, each a piece of a
`NodeConfig` with `model` and `learner` keys only (a learner's model, rate and LoRA
adapter), so the two nodes run the same rounds on the same schedule. An arm is a few more
overrides (`arm_config`): the node's seed for the run seed, the loss mode, the prompts
factor of `solo-2x`, a vertical arm's `max_staleness`, and the F-TIS settings an arm name
carries after `@` (`vertical-ftis@C=4,g=20,filter_rule=and`: the cap C, the KL threshold g and
the filter rule, validated by `FTISConfig`). What is the experiment's own (the arms, the
seeds, when the held-out evaluation runs, its sampled part and its pre-registered end point)
is declared here. The held-out set is the node's (`node.eval_items`, `node.eval_seed`,
`node.eval_max_new_tokens`: one set of keys for a node's curve and the experiment; given at
the top level, as before they moved, they go to `node`); the experiment's nodes run no curve
of their own (`eval_every` 0): the experiment evaluates at its `eval_rounds`, with the node's
evaluator (node/heldout.py).

    cfg = ExperimentConfig(node={"rounds": 4, "sampling": {"group_size": 6}}, arms=["solo", "vertical-ftis"])
    cfg.node.rounds                                  # 4: the shared NodeConfig
    arm_config(cfg, 1, seed=2, arm="vertical-ftis")  # learner B's NodeConfig in that run
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ftis_swarm.config import LOSS_MODES, FTISConfig, NodeConfig, format_validation_error

MODES = tuple(LOSS_MODES)
FULL_ARMS = ("solo", "vertical-nois", "vertical-tis", "vertical-ftis", "vertical-fvis")
"""The pre-registered design's arms (issue 29), which separate the causes: alone; the peer's samples
uncorrected (weight 1, negatives kept); weighted min(exp(x), C) without the filter; weighted and
filtered (F-TIS); filtered with the untruncated weight exp(x) (F-VIS, whose collapses are counted).
`nois` -> `tis` isolates the weights, `tis` -> `ftis` the filter, `ftis` -> `fvis` the truncation."""
QUICK_ARMS = FULL_ARMS
FTIS_ARM_KEYS = {"C": float, "g": float, "filter_rule": str}
"""The F-TIS settings an arm name may set after `@`, and their types."""
RUN_ID = "experiment"
LEARNER_SEED_STRIDE = 1_000_000
"""Learner i of seed s is the node with seed `s + LEARNER_SEED_STRIDE * i` (A: the seed itself)."""
LEARNER_KEYS = frozenset({"model", "learner", "task", "accept_tasks"})
"""The NodeConfig keys a learner's overrides may set (a specialist trains on a task of its own and may
accept its partner's); the rest is the shared `node`."""

BASE_NODE: dict[str, Any] = {
    "task": "arith_mix", "rounds": 4, "prompts_per_round": 2, "backend": "transformers",
    "eval_every": 0, "eval_items": None, "eval_max_new_tokens": 16,
    "sampling": {"temperature": 0.7, "max_new_tokens": 16, "group_size": 6},
    "learner": {"dtype": "fp32", "micro_batch": 32},
    "swarm": {"run_id": RUN_ID, "wire": {"max_group_size": 64}},
}
"""The experiment's defaults of the shared node, over NodeConfig's own. `learner.dtype` fp32: on
this machine's CPU (AVX2, no bf16 instructions) a bf16 round of the quick setting took 2.2 x the
fp32 one, its learning 7.5 x (rollout and evaluation stay fp32 either way). `eval_items` None: the
whole test split (95 items of `arith_mix`)."""
NODE_EVAL_KEYS = ("eval_items", "eval_seed", "eval_max_new_tokens")
"""The held-out keys the experiment shares with a node (NodeConfig's); at the top level of an
experiment's config (where they were before) they are moved into `node`."""
PEER_MODEL = "smollm2-bias2"
"""Learner B of the pre-registered design: SmolLM2 with a fixed logit bias of scale sigma
(models/logit_bias.py), sigma picked by the pilot's rule (`lab.experiment.sigma_pilot`):
2 in the second pilot, docs/pilot_sigma2.json (no sigma reached ESS 0.4 with reward >= 0.1,
so the lowest ESS with that reward, 0.524; its gate passes). The first pilot
(docs/pilot_sigma.json) chose 1.5, whose gate failed on ESS 0.638 > 0.6."""
FULL_LEARNERS: tuple[dict[str, Any], dict[str, Any]] = (
    {"model": "smollm2-135m", "learner": {"lr": 2e-5}},
    {"model": PEER_MODEL, "learner": {"lr": 2e-5}},
)
"""A, then B: SmolLM2-135M and the biased SmolLM2, both fully fine-tuned at A's learning rate
(the pilot's second step picks it: docs/experiment.md)."""
QUICK_LEARNERS = FULL_LEARNERS
"""The quick setting runs the same pair: B's bias makes its samples off-policy for A from the
first round, so one round exercises weights and filter."""
END_ROUND = 4
"""The pre-registered end point: held-out accuracy after round 4 (evaluated after rounds 2 and 4)."""


class WarmStart(BaseModel):
    """A learner made a specialist before every run: `rounds` solo rounds of its own task, once, with seed
    `seed` (the same for every run and seed: the partner a run starts from is one checkpoint, as the
    paper's partners are given models), at `lr` (None: the learner's) with `prompts_per_round` prompts
    (None: the shared node's). Its weights are the learner's start in every arm and the start evaluation."""

    model_config = ConfigDict(extra="forbid")
    learner: str = "B"
    rounds: int = Field(ge=1, le=200)
    lr: Optional[float] = Field(None, gt=0, le=1.0)
    prompts_per_round: Optional[int] = Field(None, ge=1, le=256)
    seed: int = Field(900, ge=0)


class ArmSpec(NamedTuple):
    """What an arm name means: the round kind, the loss mode, the prompts-per-round factor, the staleness."""

    kind: str
    mode: str
    prompts_factor: int = 1
    staleness: Optional[int] = None
    """`max_staleness` of this arm's vertical rounds; None: the shared node's."""
    ftis: tuple[tuple[str, Any], ...] = ()
    """F-TIS settings of the arm's name after `@` (`C`, `g`, `filter_rule`), over the learner's own."""


def _ftis_overrides(arm: str, text: str) -> tuple[tuple[str, Any], ...]:
    """`C=2,g=50` -> `(("C", 2.0), ("g", 50.0))`, checked by `FTISConfig`; ValueError of one sentence."""
    out: dict[str, Any] = {}
    for piece in text.split(","):
        key, eq, value = piece.partition("=")
        if not eq or key not in FTIS_ARM_KEYS or key in out:
            raise ValueError(f"arm {arm!r}: after '@' give key=value pairs, each of {', '.join(FTIS_ARM_KEYS)} at "
                             f"most once, separated by commas")
        try:
            out[key] = FTIS_ARM_KEYS[key](value)
        except ValueError:
            raise ValueError(f"arm {arm!r}: {key} must be a number, got {value!r}") from None
    try:
        FTISConfig(**out)
    except ValidationError as exc:
        raise ValueError(f"arm {arm!r}: {format_validation_error(exc)}") from None
    return tuple(out.items())


def arm_spec(arm: str) -> ArmSpec:
    """`solo`, `solo-2x` (twice the prompts a round: as many samples learned as a swarm arm),
    `vertical-<mode>` or `horizontal-<mode>`, a vertical one optionally ending `-stale<k>`; a
    swarm arm optionally followed by `@` and F-TIS settings (`vertical-ftis@C=4,g=20`)."""
    base, at, settings = arm.partition("@")
    if at:
        spec = arm_spec(base)
        if spec.kind == "solo":
            raise ValueError(f"arm {arm!r}: a solo arm learns no peer sample, so it takes no F-TIS settings")
        return spec._replace(ftis=_ftis_overrides(arm, settings))
    if arm == "solo":
        return ArmSpec("solo", "ftis")
    if arm == "solo-2x":
        return ArmSpec("solo", "ftis", prompts_factor=2)
    kind, _, rest = arm.partition("-")
    mode, _, stale = rest.partition("-")
    staleness = None
    if stale:
        k = stale.removeprefix("stale")
        if kind != "vertical" or not stale.startswith("stale") or not k.isdigit() or int(k) > 8:
            raise ValueError(f"arm {arm!r}: only a vertical arm takes a suffix, -stale<k> with k 0..8")
        staleness = int(k)
    if kind not in ("vertical", "horizontal") or mode not in MODES:
        raise ValueError(f"arm {arm!r} is not solo, solo-2x, vertical-<mode>[-stale<k>] or horizontal-<mode> "
                         f"with a mode of {', '.join(MODES)}")
    return ArmSpec(kind, mode, staleness=staleness)


def merged(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """`base` with `changes` applied, section by section (a section given as None replaces the whole)."""
    out = dict(base)
    for key, value in changes.items():
        out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def with_node_eval_keys(data: dict[str, Any]) -> dict[str, Any]:
    """An experiment's config (or saved run key) with `NODE_EVAL_KEYS` given at its top level moved into `node`."""
    moved = {k: data[k] for k in NODE_EVAL_KEYS if k in data}
    if not moved:
        return data
    out = {k: v for k, v in data.items() if k not in moved}
    node = out.get("node") or {}
    out["node"] = ({**node.model_dump(), **moved} if isinstance(node, NodeConfig) else {**node, **moved})
    return out


def node_config(data: dict[str, Any], *, where: str) -> NodeConfig:
    """`NodeConfig` of `data`; ValueError of one sentence naming `where` when NodeConfig refuses it."""
    try:
        return NodeConfig.model_validate(data)
    except ValidationError as exc:
        raise ValueError(f"{where}: {format_validation_error(exc)}") from None


class ExperimentConfig(BaseModel):
    """Everything a run depends on; written to the output folder and checked on resume."""

    model_config = ConfigDict(extra="forbid")
    node: NodeConfig = Field(default_factory=lambda: NodeConfig.model_validate(BASE_NODE))
    """The NodeConfig both learners share; a dict given here is applied over `BASE_NODE`."""
    learners: tuple[dict[str, Any], dict[str, Any]] = FULL_LEARNERS
    """A's and B's overrides on `node` (keys `model` and `learner`); both must share a tokenizer."""
    arms: list[str] = Field(default_factory=lambda: list(FULL_ARMS))
    seeds: list[int] = Field(default_factory=lambda: list(range(12)))
    """Run seeds: 12 at the pilot's per-seed sd up to 0.05, 16 above (`claims.seeds_needed`); the pilot uses others."""
    eval_task: Optional[str] = None
    """Task of the held-out accuracy (e.g. math500 for the paper's out-of-distribution figure); None: the node's task.
    Its items, their seed and answer length are the node's keys (`node.eval_items`, ...). Every learner is
    also evaluated on `node.eval_tasks` (an evaluation's `by_task` holds each task's figures)."""
    eval_samples: int = Field(8, ge=0, le=64)
    """Sampled completions per held-out item beside the greedy one (0: greedy only)."""
    eval_temperature: Optional[float] = Field(None, gt=0, le=10)
    """Temperature of the sampled held-out completions; None: the node's sampling temperature."""
    eval_rounds: list[int] = Field(default_factory=list)
    """Rounds after which held-out accuracy is measured; empty: rounds 2 and END_ROUND (those the run has), else the last."""
    end_average: int = Field(1, ge=1, le=4)
    """Evaluated rounds averaged into the end point of a specialist summary (`specialist.py`): the last
    `end_average` of `eval_rounds` (2 in issue 42's design; issue 29's claims test `end_round` alone)."""
    warm: Optional[WarmStart] = None
    """A learner warm-started as a specialist before every run (issue 42's design); None: none."""
    end_round: Optional[int] = None
    """The end point the claims test, one of `eval_rounds`; None: the last of them (END_ROUND, 4, by default),
    written to config.json before the first run, so it is fixed before any result exists."""

    @model_validator(mode="before")
    @classmethod
    def _node_eval_keys(cls, data: Any) -> Any:
        return with_node_eval_keys(data) if isinstance(data, dict) else data

    @field_validator("node", mode="before")
    @classmethod
    def _node(cls, v: Any) -> Any:
        return merged(BASE_NODE, v) if isinstance(v, dict) else v  # then NodeConfig validates it, errors at node.<key>

    @field_validator("learners")
    @classmethod
    def _learners(cls, v: tuple[dict[str, Any], dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
        for name, over in zip("AB", v):
            extra = sorted(set(over) - LEARNER_KEYS)
            if extra or "model" not in over:
                raise ValueError(f"learner {name}'s overrides set {', '.join(extra) or 'no model'}; they take a "
                                 "model and learner settings only (the rest is the shared node)")
        return v

    @field_validator("arms")
    @classmethod
    def _arms(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("at least one arm is needed")
        for arm in v:
            arm_spec(arm)
        return list(dict.fromkeys(v))

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, v: list[int]) -> list[int]:
        if not v or any(s < 0 for s in v):
            raise ValueError("seeds must be a non-empty list of non-negative integers")
        return list(dict.fromkeys(v))

    @model_validator(mode="after")
    def _shape(self) -> "ExperimentConfig":
        g, rounds = self.node.sampling.group_size, self.node.rounds
        if g % 2 or g < 4:
            raise ValueError(f"node.sampling.group_size must be even and at least 4 (horizontal groups split it in "
                             f"two), got {g}")
        if not self.eval_rounds:
            self.eval_rounds = [r for r in (2, END_ROUND) if r <= rounds] or [rounds]
        if any(not 1 <= r <= rounds for r in self.eval_rounds):
            raise ValueError(f"eval_rounds must lie in 1..{rounds}, got {self.eval_rounds}")
        self.eval_rounds = sorted(set(self.eval_rounds))
        if self.end_round is None:
            self.end_round = self.eval_rounds[-1]
        if self.end_round not in self.eval_rounds:
            raise ValueError(f"end_round {self.end_round} must be one of eval_rounds {self.eval_rounds}")
        if self.end_average > len(self.eval_rounds):
            raise ValueError(f"end_average {self.end_average} exceeds the {len(self.eval_rounds)} eval_rounds")
        if self.warm is not None and self.warm.learner not in self.learner_names:
            raise ValueError(f"warm.learner must be one of {', '.join(self.learner_names)}, got {self.warm.learner!r}")
        for i, name in enumerate(self.learner_names):
            self.learner_node(i, where=f"learner {name}")
        return self

    @property
    def learner_names(self) -> tuple[str, str]:
        return ("A", "B")

    @property
    def eval_task_names(self) -> list[str]:
        """Every task a learner is evaluated on: the held-out task first, then `node.eval_tasks`."""
        return list(dict.fromkeys([self.eval_task or self.node.task, *self.node.eval_tasks]))

    def learner_node(self, index: int, *, where: str = "learner") -> NodeConfig:
        """Learner `index`'s NodeConfig: the shared node with its overrides, validated by NodeConfig."""
        return node_config(merged(self.node.model_dump(), self.learners[index]), where=where)


def learner_seed(seed: int, index: int) -> int:
    return seed + LEARNER_SEED_STRIDE * index


def arm_config(cfg: ExperimentConfig, index: int, seed: int, arm: str) -> NodeConfig:
    """The NodeConfig learner `index` runs as in `arm` with run seed `seed`: its node, the arm's overrides."""
    spec = arm_spec(arm)
    base = cfg.learner_node(index)
    staleness = (base.max_staleness if spec.staleness is None else spec.staleness) if spec.kind == "vertical" else 0
    changes = {"seed": learner_seed(seed, index), "prompts_per_round": base.prompts_per_round * spec.prompts_factor,
               "max_staleness": staleness, "learner": {"ftis": {"mode": spec.mode, **dict(spec.ftis)}}}
    return node_config(merged(base.model_dump(), changes), where=f"arm {arm}")


def quick_config(**overrides: Any) -> ExperimentConfig:
    """The `--quick` setting: every arm kind once, one round, small groups, 8 held-out items; a couple of minutes."""
    base: dict[str, Any] = dict(learners=QUICK_LEARNERS, arms=list(QUICK_ARMS), seeds=[0], eval_samples=2,
                                node={"rounds": 1, "prompts_per_round": 2, "sampling": {"group_size": 4},
                                      "eval_items": 8})
    base.update(overrides)
    return ExperimentConfig(**base)
