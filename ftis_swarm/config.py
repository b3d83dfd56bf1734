"""Every setting of a node, as strict pydantic models (pydantic, the standard library and `ftis_swarm.errors` only).

A node's whole configuration is one `NodeConfig`: TOML file first, then `FTIS_*`
environment variables, then CLI flags and `--set key=value` on top (`ftis_swarm.cli`).
Each section is its own model so that the parts (core, wire, rollout, learner, swarm) take
only what they use. Unknown keys are errors, not silently ignored: a typo in a config file
must not fall back to a default without a word.

Also here, low in the layering so that every layer can use them: `ConfigError` (a
`UserError`, see ftis_swarm.errors), `format_validation_error` (the one way a pydantic
error becomes one sentence), and `LOSS_MODES` (what each loss mode does; the config, the
CLI help and the experiment read it from here).
"""

from __future__ import annotations

import ipaddress
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Mapping, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ftis_swarm.errors import UserError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


class ConfigError(UserError, ValueError):
    """A config file, environment variable or flag that does not validate, said in one sentence."""


_PYDANTIC_PREFIXES = ("Value error, ", "Assertion failed, ")


def format_validation_error(exc: ValidationError, *, as_flags: bool = False) -> str:
    """The first problem of a pydantic error as one sentence: `where: what (got value)`.

    `where` is the dotted key (`learner.ftis.mode`), or the flag (`--max-clock-skew`) with
    `as_flags`; pydantic's "Value error, " prefixes are dropped, and further problems are
    counted, not listed.
    """
    errors = exc.errors()
    first = errors[0]
    parts = [str(p) for p in first["loc"]]
    if as_flags:
        where = "--" + "-".join(parts).replace("_", "-") if parts else "options"
    else:
        where = ".".join(parts) or "config"
    msg = first["msg"]
    for prefix in _PYDANTIC_PREFIXES:
        if msg.startswith(prefix):
            msg = msg[len(prefix):]
    got = first.get("input")
    plain = got is not None and not isinstance(got, (dict, list, tuple)) and first["type"] != "value_error"
    shown = f" (got {got!r})" if plain else ""
    more = len(errors) - 1
    tail = f"; and {more} more problem{'s' * (more > 1)}" if more else ""
    return f"{where}: {msg}{shown}{tail}"


T_MIN = 0.05
"""Lowest sampling temperature a group may carry (proto/group_v1.md). A receiver divides its
logits by T; near zero (a peer sent T = 1e-300) they overflow and its log-probs are NaN.
0.05 is far from that and below any temperature RL samples at."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False)


LossMode = Literal["nois", "vis", "tis", "filter", "fvis", "ftis"]
"""The loss modes of docs/method.md; what each does is in `LOSS_MODES`."""


@dataclass(frozen=True)
class ModeSpec:
    """What a loss mode does: its per-token importance weight, and whether it filters peers' samples."""

    weight: Literal["one", "exp", "truncated"]
    """`one`: 1; `exp`: exp(x); `truncated`: min(exp(x), C), with x = logp_old - logp_gen."""
    filters: bool
    summary: str


LOSS_MODES: dict[str, ModeSpec] = {
    "nois": ModeSpec("one", False, "weight 1, nothing filtered (plain GRPO on every sample)"),
    "vis": ModeSpec("exp", False, "weight exp(x), untruncated, nothing filtered"),
    "tis": ModeSpec("truncated", False, "weight min(exp(x), C), nothing filtered"),
    "filter": ModeSpec("one", True, "weight 1, harmful peer samples filtered"),
    "fvis": ModeSpec("exp", True, "weight exp(x), harmful peer samples filtered"),
    "ftis": ModeSpec("truncated", True, "weight min(exp(x), C), harmful peer samples filtered (the default)"),
}
"""Mode -> what it does (docs/method.md, Modes); the one place the list of modes is spelled out."""
assert tuple(LOSS_MODES) == LossMode.__args__  # type: ignore[attr-defined]


class FTISConfig(_Strict):
    """The F-TIS loss (docs/method.md). The paper's baselines are modes, not test-only flags."""

    mode: LossMode = "ftis"
    """Importance weight and filter, see `LOSS_MODES`: nois/filter weight 1, vis/fvis exp(x),
    tis/ftis min(exp(x), C); filter/fvis/ftis also drop harmful peer samples."""
    C: float = Field(2.0, gt=0)
    """Truncation cap of the importance weight."""
    g: float = Field(50.0, gt=0)
    """KL threshold of the filter, on the per-sample summed-over-tokens scale."""
    eps: float = Field(0.2, gt=0, lt=1)
    """PPO clip range of the ratio exp(logp - logp_old)."""
    filter_rule: Literal["or", "and"] = "or"
    """`or`: filtered when A <= 0 or kl > g (the method as stated); `and`: A < 0 and kl > g."""
    filter_scope: Literal["offpolicy", "all"] = "offpolicy"
    """Whom the filter applies to: off-policy samples only (own pass), or every sample."""
    kl_estimator: Literal["rlogr", "k3"] = "rlogr"
    """Per-token KL term: rlogr = r*x - r + 1 (proxy for KL(pi_theta||pi_gen)), k3 = r - 1 - x."""

    @property
    def weighted(self) -> bool:
        """The weight is exp(x) or its truncation (not 1)."""
        return LOSS_MODES[self.mode].weight != "one"

    @property
    def truncates(self) -> bool:
        return LOSS_MODES[self.mode].weight == "truncated"

    @property
    def filters(self) -> bool:
        return LOSS_MODES[self.mode].filters


class WireConfig(_Strict):
    """Limits the decoder enforces on every group that arrives (proto/group_v1.md)."""

    max_group_size: int = Field(64, ge=2, le=4096)
    """Most completions per group (G)."""
    max_completion_tokens: int = Field(8192, ge=1)
    """Most tokens in one completion."""
    max_prompt_tokens: int = Field(8192, ge=1)
    """Most tokens in the prompt."""
    max_bytes: int = Field(1 << 20, ge=1024, le=4 << 20)
    """Most bytes in one encoded group (1 MiB by default; p2pd caps a message at 4 MiB)."""


class SamplingConfig(_Strict):
    """How rollouts are sampled. Top-p and top-k stay off: the sampled distribution is softmax(z/T)."""

    temperature: float = Field(1.0, ge=T_MIN, le=10)
    """Peers refuse groups sampled below `T_MIN` = 0.05."""
    max_new_tokens: int = Field(64, ge=1, le=32768)
    """Most tokens per completion. Left unset, `ftis-node join` takes the task's own default
    (64 for arith, 512 for GSM8K, 1024 for MATH-500: docs/tasks.md)."""
    group_size: int = Field(8, ge=2, le=4096)
    """G, the completions per prompt in a vertical group."""
    seed: Optional[int] = None
    """Seed of generation (with the backend's count of calls, so no two calls repeat); a node
    leaves it unset and samples with its own `seed`, which makes a resumed node's samples
    those of an uninterrupted run."""


class LoRAConfig(_Strict):
    rank: int = Field(8, ge=1, le=1024)
    alpha: float = Field(16.0, gt=0)
    dropout: float = Field(0.0, ge=0, lt=1)
    target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )


FULL_LR = 1e-6
"""The paper's learning rate for a full fine-tune."""
LORA_LR = 1e-5
"""The default when a LoRA adapter is trained and no `lr` is given: ten times the full
fine-tune's, the ratio at which LoRA matched full fine-tuning in RL ("LoRA Without Regret",
Thinking Machines, 2025)."""


class LearnerConfig(_Strict):
    lr: float = Field(FULL_LR, gt=0, le=1)
    """AdamW learning rate; 1e-6 for a full fine-tune, 1e-5 when `lora` is set and no lr is given."""
    weight_decay: float = Field(0.0, ge=0)
    betas: tuple[float, float] = (0.9, 0.999)
    grad_clip: float = Field(1.0, gt=0)
    dtype: Literal["fp32", "bf16"] = "fp32"
    epochs: int = Field(1, ge=1, le=64)
    """PPO epochs (optimiser steps) per batch; logp_old is fixed at the start of the update."""
    micro_batch: int = Field(8, ge=1)
    """Sequences per forward/backward; the gradient accumulates over the batch."""
    logprob_chunk: int = Field(512, ge=1)
    """Positions per chunk of the output head (no [B, T, V] logits tensor for the whole batch)."""
    activation_checkpointing: bool = False
    """Recompute each decoder layer's activations in the backward pass instead of keeping them:
    about a third more compute, and activation memory falls to each layer's input plus one layer's."""
    lora: Optional[LoRAConfig] = None
    """Train a LoRA adapter instead of the full model."""
    max_peer_groups: int = Field(64, ge=0)
    """Most peers' groups in one update."""
    max_groups_per_peer: int = Field(16, ge=0)
    """Most groups one peer may contribute to one update (the swarm gathers no more per peer either)."""
    max_peer_tokens: Optional[int] = Field(None, ge=1)
    """Most peers' completion tokens in one update; None: 4 x this node's own per round
    (prompts_per_round x group_size x max_new_tokens). Groups over it wait one round, then are dropped."""
    max_peer_tokens_per_peer: Optional[int] = Field(None, ge=1)
    """Most completion tokens one peer may put into one update; None: 2 x this node's own per round."""
    strangers_share: float = Field(0.25, ge=0, le=1)
    """The part of the peers' token and group budget reserved for, and capped to, peers without
    standing (drawn origin first, then identity, seeded by the node's peer id and round: peers/draw.py);
    peers with standing share the rest. The swarm fetches strangers' groups within the same share."""
    max_prompt_overhead: int = Field(256, ge=0)
    """Most prompt tokens a peer's group may hold beyond its item's own prompt text (chat template,
    system prompt); longer prompts are refused."""
    forgery_delta: float = Field(1e-6, gt=0, lt=1)
    """False-alarm probability of one check of the forgery detector (Hoeffding bound, docs/method.md)."""
    forgery_window: int = Field(4096, ge=1)
    """Tokens of a peer's most recent groups the forgery detector averages over."""
    standing_margin: float = Field(0.25, gt=0)
    """m: a peer has standing once the detector's upper bound on its mean truncated weight is
    below 1 + m (a few hundred tokens at 0.25); until then its samples' weights are capped at 1
    (docs/node.md, "Standing")."""
    ftis: FTISConfig = Field(default_factory=FTISConfig)

    @model_validator(mode="before")
    @classmethod
    def _lora_lr(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("lora") is not None and data.get("lr") is None:
            return {**data, "lr": LORA_LR}
        return data


_MULTIADDR = re.compile(r"/(ip4|ip6|dns|dns4|dns6)/([^/\s]+)/(tcp|udp)/(\d{1,5})((?:/[^/\s]+)*)")


def check_multiaddr(text: str) -> str:
    """`text` when it reads as a multiaddr (`/ip4/<address>/tcp/<port>[/p2p/<peer id>]`), else ValueError."""
    match = _MULTIADDR.fullmatch(text.strip())
    example = "/ip4/203.0.113.7/tcp/31337/p2p/<peer id>"
    if match is None:
        raise ValueError(f"{text!r} is not a multiaddr like {example}")
    proto, host, _, port, _ = match.groups()
    if proto in ("ip4", "ip6"):
        try:
            ipaddress.ip_address(host)
        except ValueError:
            raise ValueError(f"{text!r}: {host!r} is not an {proto} address") from None
    if not 0 < int(port) <= 65535:
        raise ValueError(f"{text!r}: port {port} is outside 1-65535")
    return text.strip()


class PuzzleConfig(_Strict):
    """The memory-hard puzzle every identity solves once per run (ftis_swarm/swarm/puzzle.py).

    The same on every peer of a run: a record whose owner's puzzle is not solved at these
    settings is refused. At the defaults one scrypt try takes about 60 ms on one core
    (16 MiB of memory), so an identity costs about 2^bits x 60 ms: some 4 s at 6 bits.
    """

    bits: int = Field(6, ge=0, le=32)
    """Leading zero bits the scrypt digest of (public key, run id, nonce) must have."""
    log2_n: int = Field(14, ge=1, le=20)
    """scrypt's cost N = 2^log2_n; memory is 128 x r x N bytes (16 MiB at 14 and r = 8)."""
    r: int = Field(8, ge=1, le=32)
    """scrypt's block size."""
    verify_rate: float = Field(4.0, gt=0, le=10_000)
    """New identities' puzzles this node verifies per second, sustained (each costs one scrypt);
    a record of an identity over the rate is refused for now (`puzzle_busy`, no fault of anyone)."""
    verify_burst: int = Field(32, ge=1, le=100_000)
    """New identities' puzzles verified at once before `verify_rate` applies."""


class SwarmConfig(_Strict):
    """The hivemind side of a node (ftis_swarm.swarm)."""

    peers: list[str] = Field(default_factory=list)
    """Multiaddrs of peers already in the swarm (a bootstrap peer); empty: start a new swarm."""
    peers_file: Optional[Path] = None
    """A file of multiaddrs, one per line, added to `peers` at start (what `ftis-node bootstrap
    --maddrs-file` writes; docker-compose shares it through a volume)."""
    host: str = "0.0.0.0"
    port: int = Field(0, ge=0, le=65535)
    """TCP port to listen on; 0 picks a free one."""
    announce: list[str] = Field(default_factory=list)
    """Multiaddrs to announce to peers instead of the listening ones (behind NAT)."""
    client_mode: bool = False
    """Accept no incoming connections (for nodes behind NAT); such a node can still gather. With
    `reachability` auto it means `relayed`."""
    reachability: Literal["auto", "public", "relayed", "client"] = "auto"
    """How peers reach this node (docs/swarm.md, Reach): `public` (dialable; serves the DHT and a
    bounded relay), `relayed` (behind NAT; a slot on the bootstrap peers' relays, so other home
    nodes fetch its groups), `client` (behind NAT; only public peers fetch from it, over the
    connection it opened). `auto`: `relayed` with `client_mode`; else the `peers` are asked to
    dial this node's port back: `public` if one could, else `relayed` (`public` with no peers)."""
    reach_recheck_every: float = Field(300.0, gt=0, le=86400)
    """Seconds between two dial-back rechecks of a running node (`swarm.dialback.watch_reachability`:
    one short stream to each of at most 5 peers)."""
    reach_switch_after: int = Field(2, ge=1, le=1000)
    """Rechecks in a row that contradict the mode (a public node nobody could dial, a relayed one a peer
    could) before an `auto` node switches mode: a restart of its daemon in the other mode, with the same
    identity, port and ledger (docs/swarm.md, Reach). A configured mode never switches."""
    relay_wait: float = Field(15.0, ge=0, le=600)
    """Seconds a `relayed` node waits at start for a slot on a relay before it publishes (a WARNING
    if none: then only public peers can fetch its groups)."""
    relay_service: bool = True
    """When public, relay circuits for NAT'd peers within the four limits below."""
    relay_max_circuits: int = Field(16, ge=1, le=1024)
    """Relayed connections open at once for one peer."""
    relay_max_reservations: int = Field(128, ge=1, le=65536)
    """NAT'd peers holding a relay slot on this node at once."""
    relay_data_limit: int = Field(64 * 1024 * 1024, ge=64 * 1024)
    """Bytes relayed in each direction of one relayed connection before it is reset."""
    relay_time_limit: float = Field(1800.0, ge=1.0)
    """Seconds one relayed connection may last."""
    identity: Optional[Path] = None
    """Private-key file (its puzzle beside it, `<file>.puzzle`); created on first start and kept,
    so the peer id and its standing survive a restart. None: `identity.key` in the node's
    run directory (a process without one, such as `ftis-node bootstrap`, makes a fresh one)."""
    puzzle: PuzzleConfig = Field(default_factory=PuzzleConfig)
    run_id: str = Field("ftis-default", min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._-]+$")
    """Swarm run name: only groups of the same run id are exchanged."""
    ttl: float = Field(600.0, gt=0)
    """Seconds a published group stays in the DHT; older groups are dropped on gather."""
    max_clock_skew: float = Field(30.0, ge=0)
    """Seconds two peers' clocks may differ: a record may expire at most ttl + this far ahead."""
    window: float = Field(30.0, gt=0)
    """Seconds per time window of the DHT key scheme (the same on every peer of a run)."""
    member_shards: Literal[1, 2, 4, 8, 16] = 1
    """Membership keys per window (the same on every peer of a run); 4 or more past ~1,000 peers."""
    max_record_bytes: int = Field(4096, ge=256)
    """Most bytes in one signed DHT record (a round pointer of 16 groups, about 1.7 KB); larger records are refused."""
    max_stored_records: int = Field(16384, ge=64)
    """Most records this node stores for others, all keys together (each ~1 KB on the wire, ~2 KB in memory)."""
    max_stored_bytes: int = Field(32 << 20, ge=1 << 20)
    """Most bytes of memory the stored records may take, all keys together: each is charged its subkey
    and value plus 1 KB (`swarm/dht/storage.py`; a pointer ~2 KB, so 32 MiB hold ~16,000)."""
    max_records_per_peer: int = Field(2048, ge=16)
    """Most records this node stores that one peer sent, and that one owner signed."""
    origin_prefix_v4: int = Field(24, ge=8, le=32)
    """An IPv4 peer's network origin: this prefix of its connection's address (a /24)."""
    origin_prefix_v6: int = Field(48, ge=16, le=128)
    """An IPv6 peer's network origin: this prefix of its connection's address (a /48)."""
    max_records_per_origin: int = Field(4096, ge=16)
    """Most records this node stores that peers of one network origin sent, all together; the peers
    reached through a relay count as one origin (a global cap: a relay's address is not theirs)."""
    max_fetches_per_origin: int = Field(4, ge=1, le=255)
    """Body streams open at once to publishers of one network origin (the relayed ones as one)."""
    max_groups_per_peer_per_gather: int = Field(16, ge=1)
    """Most groups one peer may contribute to one gather; its further groups wait for the next one.
    A node lowers it to its `learner.max_groups_per_peer` when that is smaller."""
    poll_interval: float = Field(1.0, gt=0, le=60)
    """Seconds between two ticks of the background gatherer (re-reads, fetch back-off); with gossip
    off, also between two reads of the DHT's membership keys."""
    gossip: bool = True
    """Push each signed pointer to the run's peers over gossipsub (p2pd's pubsub) the moment it is
    published; the DHT stays for discovery, late joiners and pointers gossip missed. False: poll only."""
    dht_poll_interval: float = Field(5.0, gt=0, le=600)
    """Seconds between two reads of the DHT's membership keys while gossip is on (the fallback)."""
    gossip_rate: float = Field(4.0, gt=0, le=1000)
    """Pointers per second one sender may gossip, sustained (after `gossip_burst`); more are dropped."""
    gossip_burst: int = Field(64, ge=1, le=4096)
    """Pointers one sender may gossip at once (a round's groups); a sender that goes on dropping
    more than this past its rate is disconnected and ignored for a while."""
    fetch_timeout: float = Field(10.0, gt=0)
    """Seconds to fetch one group body from its publisher before the attempt counts as failed."""
    max_fetch_attempts: int = Field(3, ge=1)
    """Failed fetches of one body, or failed fetches in a row from one publisher (then all its pending
    bodies), before they are rejected as `fetch_failed` (or `stalled`)."""
    max_concurrent_fetches: int = Field(8, ge=2, le=256)
    """Body streams open at once, for all publishers together (half of them at most for unproven ones);
    each carries up to `max_bodies_per_stream` bodies of one source."""
    max_fetches_per_peer: int = Field(2, ge=1, le=255)
    """Body streams open at once for one publisher's groups; below max_concurrent_fetches, so no one holds
    every slot."""
    max_bodies_per_stream: int = Field(8, ge=1, le=32)
    """Bodies this node asks one source for in one stream (`fetch.streams`; 32: what a server takes): a
    stream's set-up (~20 ms) is paid once for them, and each body still has its own clock. 1: one
    body per stream."""
    first_byte_timeout: float = Field(3.0, gt=0)
    """Seconds from asking for a body to its header (and between two reads of it): longer is a stall."""
    min_body_rate: int = Field(256 * 1024, ge=1024)
    """Bytes per second a body must at least arrive at; slower is a stall (`fetch_timeout` bounds it too)."""
    max_streams_per_peer: int = Field(4, ge=1, le=64)
    """Body streams this node serves at once to one requester; further requests are answered busy."""
    hold_bytes: int = Field(64 << 20, ge=0, le=16 << 30)
    """Bytes of other peers' accepted bodies this node keeps and serves (`fetch.bodies`: holders), each
    until its pointer expires, the oldest dropped first; 0: it holds and announces none."""
    upload_bytes_per_window: int = Field(0, ge=0)
    """Body bytes this node serves per `upload_window` s, its own and held ones together (its own first,
    held ones within half of it; one own body is always sent while the window is below the cap, so
    at most the cap plus one body goes out a window); past it requests are answered busy. 0: no cap."""
    upload_window: float = Field(10.0, gt=0, le=3600)
    """Seconds of one upload window (`upload_bytes_per_window`)."""
    max_holder_serves: int = Field(4, ge=0, le=64)
    """Held bodies (other peers') this node serves at once; more are answered busy. 0: it serves and
    announces none (it still keeps them, within `hold_bytes`)."""
    have_interval: float = Field(10.0, gt=0, le=600)
    """Seconds between two gossiped announcements of the bodies this node holds while they stay the same
    (`records.HaveRecord`); a change is announced within a quarter of it (`gossip.haves`)."""
    num_replicas: int = Field(5, ge=1, le=64)
    """Peers nearest to a key that are asked to store each pointer."""
    min_replicas: int = Field(1, ge=1, le=64)
    """Peers other than this one that must accept a pointer for a publish to succeed."""
    publish_timeout: float = Field(10.0, gt=0)
    """Seconds a publish may take (finding the nearest peers and storing the pointer)."""
    join_timeout: float = Field(30.0, gt=0)
    """Seconds to start the libp2p daemon and reach the --peers."""
    wire: WireConfig = Field(default_factory=WireConfig)

    @model_validator(mode="after")
    def _fetch_slots(self) -> "SwarmConfig":
        if self.max_fetches_per_peer >= self.max_concurrent_fetches:
            raise ValueError(
                f"max_fetches_per_peer={self.max_fetches_per_peer} must be below "
                f"max_concurrent_fetches={self.max_concurrent_fetches}"
            )
        return self

    @model_validator(mode="after")
    def _holding(self) -> "SwarmConfig":
        if 0 < self.hold_bytes < self.wire.max_bytes:
            raise ValueError(f"hold_bytes={self.hold_bytes} must be 0 or at least wire.max_bytes={self.wire.max_bytes}")
        return self

    @model_validator(mode="after")
    def _one_reachability(self) -> "SwarmConfig":
        if self.client_mode and self.reachability == "public":
            raise ValueError("client_mode accepts no incoming connections, so reachability cannot be public")
        return self

    @property
    def reach_mode(self) -> Literal["public", "relayed", "client"]:
        """The reachability this node starts in, `auto` resolved without a probe (`swarm.runtime.open_peer`
        probes an `auto` node that has peers)."""
        if self.reachability != "auto":
            return self.reachability
        return "relayed" if self.client_mode else "public"

    @field_validator("peers", "announce")
    @classmethod
    def _multiaddrs(cls, v: list[str]) -> list[str]:
        return [check_multiaddr(m) for m in v]


class LedgerConfig(_Strict):
    """Which peers a node takes groups from, and how faults cost them (ftis_swarm/peers/ledger.py)."""

    allow_peers: list[str] = Field(default_factory=list)
    """Peer ids (base58) whose groups are taken; empty: every peer not denied (a public swarm)."""
    deny_peers: list[str] = Field(default_factory=list)
    """Peer ids whose groups are never taken."""
    ban_threshold: float = Field(20.0, gt=0)
    """Fault points (costs in peers/ledger.py) that ban a peer; counted afresh after each ban."""
    ban_seconds: float = Field(60.0, gt=0)
    """Length of a peer's first ban; each further ban doubles it, up to `max_ban_seconds`."""
    max_ban_seconds: float = Field(3600.0, gt=0)
    """Longest ban."""
    gossip_ban_seconds: float = Field(30.0, gt=0)
    """Length of the gossip gate's first ban of a sender that floods the topic past its rate; each
    further one doubles it, up to `max_ban_seconds` and a quarter of `swarm.ttl`."""
    max_credit_per_update: float = Field(4.0, ge=0)
    """Most credit one peer earns from one update (a group whose every sample carried signal at a
    weight of 1 or more and passed every check earns 1; a sample earns in proportion to its weight)."""
    credit_half_life: float = Field(50.0, ge=0)
    """Rounds in which a peer's credit halves (it decays once a round); 0: credit never decays. A proven
    fault (any charge that costs points) takes all of it at once."""


def _plain_task_name(v: str) -> str:
    if not v or not v.replace("_", "").isalnum():
        raise ValueError(f"task name {v!r} is not a plain name like 'arith' or 'gsm8k'")
    return v


class NodeConfig(_Strict):
    """Everything `ftis-node join` needs; written resolved to the run directory."""

    model: str = "smollm2-135m"
    """Hub id, local path, or short name (`Qwen2.5-1.5B`, `smollm2-135m`, `smollm2-mini`)."""
    hub_timeout: float = Field(60.0, gt=0, le=3600)
    """Seconds the model hub may stay silent while the node starts (no answer to a request, no next bytes of
    a download) before the node stops with one sentence, or loads the hub cache's copy; a download that
    keeps arriving is never cut (models/hub.py `hub_deadline`)."""
    task: str = "arith"
    """Task the node draws its own prompts from (`arith`, `gsm_symbolic`, `gsm8k`, `math500`, `champ`)."""
    run_dir: Path = Path("runs/node")
    """Where metrics.jsonl, config.json, checkpoints/ and the node's log go."""
    rounds: int = Field(50, ge=1)
    """Rounds to run; a resumed node continues up to the same number."""
    prompts_per_round: int = Field(4, ge=1)
    """Own prompts per round, one vertical group each."""
    round_deadline: float = Field(10.0, gt=0)
    """Most seconds to wait for peers' groups after publishing; the wait ends sooner once every live
    peer's round is in (a peer is live when a pointer of it was seen within two deadlines)."""
    checkpoint_every: int = Field(5, ge=1)
    """Rounds between checkpoints (the last round is always checkpointed)."""
    keep_checkpoints: int = Field(1, ge=1)
    """Complete checkpoints kept; older ones are deleted once the next is complete (so a save in
    progress holds one more: about 1.6 GB each for a full SmolLM2-135M node with its AdamW state)."""
    max_failed_updates: int = Field(3, ge=1)
    """Failed updates in a row (the learner raised, skipped a non-finite step, or the node's own
    samples had non-finite log-probs: node/health.py) after which the node stops publishing and
    exits with status 3."""
    backend: Literal["auto", "transformers", "vllm"] = "auto"
    """Rollout backend: auto = vLLM where CUDA is present, else transformers sharing the learner's model."""
    vllm_gpu_memory_utilization: float = Field(0.35, gt=0, lt=1)
    """Share of the GPU's memory vLLM may take; the rest is the learner's (both live on one GPU)."""
    vllm_tensor_parallel_size: int = Field(1, ge=1, le=64)
    """GPUs one vLLM engine spans (tensor parallel); `ftis-node plan` says how many a model needs."""
    seed: int = 0
    """Seeds prompt sampling (per round), generation and torch."""
    threads: Optional[int] = Field(None, ge=1, le=1024)
    """torch CPU threads for this node; None keeps torch's default (all cores)."""
    max_staleness: int = Field(0, ge=0, le=8)
    """Policy versions own samples may lag the learner: 0 is the synchronous round (generate, then
    learn); k >= 1 generates round r + k while round r learns (node/pipeline.py), and an own group
    more than k versions old when its round learns is dropped and counted (`stale_dropped`)."""
    generate_threads: Optional[int] = Field(None, ge=1, le=1024)
    """With `max_staleness` >= 1 on CPU: torch threads of the generator; the learner keeps the rest of
    `threads` (at least one). None: half of them."""
    generate_in: Literal["process", "thread"] = "process"
    """With `max_staleness` >= 1 and the transformers backend on CPU: where the generator samples. A
    process of its own (weights in shared memory, refreshed in place) keeps the two sides from
    contending for the GIL; a thread of the node's process is the fallback (and what a model on a
    GPU always uses)."""
    metrics_port: Optional[int] = Field(None, ge=0, le=65535)
    """Port of the Prometheus /metrics endpoint; None: no endpoint (0 picks a free port)."""
    metrics_host: str = "127.0.0.1"
    """Address the metrics endpoint listens on (0.0.0.0 inside a container)."""
    status_port: Optional[int] = Field(None, ge=0, le=65535)
    """Port of the status page (`/` and `/status.json`: node/status_page.py); None: no page (0 picks a
    free port). `<run_dir>/status.json` is written every round either way."""
    status_host: str = "127.0.0.1"
    """Address the status page listens on; anything but loopback shows the node's peers and rounds to
    whoever can reach it."""
    tensorboard: bool = False
    """Also write each round's numbers as TensorBoard scalars under `<run_dir>/tensorboard`
    (needs the `tensorboard` extra)."""
    wandb_project: Optional[str] = Field(None, min_length=1, max_length=128)
    """Also log each round to this Weights & Biases project (needs the `wandb` extra;
    `WANDB_MODE=offline` logs without an account)."""
    accept_tasks: Optional[list[str]] = None
    """Tasks whose peers' groups this node trains on (train split only); None: its own task alone."""
    sampling: SamplingConfig = Field(default_factory=SamplingConfig)
    learner: LearnerConfig = Field(default_factory=LearnerConfig)
    swarm: SwarmConfig = Field(default_factory=SwarmConfig)
    ledger: LedgerConfig = Field(default_factory=LedgerConfig)

    @property
    def accepted_tasks(self) -> list[str]:
        """`accept_tasks`, or the node's own task when unset."""
        return list(self.accept_tasks) if self.accept_tasks is not None else [self.task]

    @field_validator("task")
    @classmethod
    def _task_name(cls, v: str) -> str:
        return _plain_task_name(v)

    @field_validator("accept_tasks")
    @classmethod
    def _task_names(cls, v: Optional[list[str]]) -> Optional[list[str]]:
        return None if v is None else [_plain_task_name(t) for t in v]

    @model_validator(mode="after")
    def _group_fits_wire(self) -> "NodeConfig":
        if self.sampling.group_size > self.swarm.wire.max_group_size:
            raise ValueError(
                f"sampling.group_size={self.sampling.group_size} exceeds swarm.wire.max_group_size="
                f"{self.swarm.wire.max_group_size}"
            )
        if self.generate_threads and self.threads and self.generate_threads >= self.threads:
            raise ValueError(f"generate_threads={self.generate_threads} must be below threads={self.threads}: the "
                             "learner keeps the rest")
        if self.metrics_port and self.metrics_port == self.swarm.port:
            raise ValueError(f"metrics_port and swarm.port are both {self.metrics_port}; give them different ports")
        if self.status_port and self.status_port in (self.swarm.port, self.metrics_port):
            raise ValueError(f"status_port {self.status_port} is also the swarm or metrics port; give it another")
        return self


def _set_dotted(tree: dict, dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    for key in parents:
        tree = tree.setdefault(key, {})
        if not isinstance(tree, dict):
            raise ConfigError(f"{dotted}: '{key}' is a value, not a section")
    tree[leaf] = value


def load_node_config(path: Optional[Path] = None, overrides: Optional[Mapping[str, Any]] = None, *,
                     keep_none: bool = False) -> NodeConfig:
    """A file (TOML, or the JSON a run directory holds), then dotted-key overrides, in their order.

    `overrides` maps dotted paths (`"learner.lr"`) to values; None values are skipped, so
    unset flags leave the file's value, unless `keep_none` (then None clears the key, as
    `--set learner.lora=none` asks). Raises `ConfigError` with one sentence.
    """
    tree: dict = {}
    if path is not None:
        try:
            raw = Path(path).read_bytes()
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None
        try:
            tree = json.loads(raw) if str(path).endswith(".json") else tomllib.loads(raw.decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            raise ConfigError(f"config file {path} does not parse: {exc}") from None
    for key, value in (overrides or {}).items():
        if value is not None or keep_none:
            _set_dotted(tree, key, value)
    try:
        return NodeConfig.model_validate(tree)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc)) from None


def dump_node_config(cfg: NodeConfig) -> str:
    """The resolved config as JSON, loadable again with `load_node_config`."""
    return cfg.model_dump_json(indent=2)
