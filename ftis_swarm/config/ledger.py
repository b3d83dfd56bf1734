"""Which peers a node takes groups from, and how faults cost them: `LedgerConfig`."""

from __future__ import annotations

from pydantic import Field

from ftis_swarm.config.base import Strict


class LedgerConfig(Strict):
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
    further one doubles it, up to `max_ban_seconds` and a quarter of `swarm.records.ttl`."""
    max_credit_per_update: float = Field(4.0, ge=0)
    """Most credit one peer earns from one update (a group whose every sample carried signal at a
    weight of 1 or more and passed every check earns 1; a sample earns in proportion to its weight)."""
    credit_half_life: float = Field(50.0, ge=0)
    """Rounds in which a peer's credit halves (it decays once a round); 0: credit never decays. A proven
    fault (any charge that costs points) takes all of it at once."""
    max_origin_share: float = Field(0.5, gt=0, le=1)
    """The most of the peers' token and group budget of one update that the identities of one network
    origin (a /24 or /48, `relayed`: swarm/origins.py) may take together, earned or not, in the swarm's
    selection and the intake alike; 1: no cap by origin (docs/method.md, "Shares")."""
    recent_earned_share: float = Field(0.25, ge=0, le=1)
    """The most of the peers' token and group budget that identities whose credit is recent (began
    within `recent_credit_rounds`) may take together in the earned part; past it they are strangers
    (docs/method.md, "Shares"). 1: no such bound."""
    recent_credit_rounds: int = Field(50, ge=0)
    """A peer's credit is recent for this many rounds after it began (its score turned positive; a proven
    fault starts it afresh), as `learner.recent_standing_updates` is for standing. 0: never recent."""
    cherry_window: int = Field(128, ge=0)
    """Groups per publisher over which the node checks for cherry-picked groups (more mixed groups than the
    publisher's pass rate explains: `peers/cherry.py`, docs/method.md "Known tricks"); a flagged publisher
    earns no credit that round. 0: no check."""
    cherry_z: float = Field(4.0, gt=0)
    """Standard deviations of excess mixed groups past which a publisher is flagged."""
    settled_rounds: int = Field(4, ge=1)
    """A peer is settled once its groups entered this node's updates in this many rounds with no proven
    fault since (its tenure, `PeerLedger.tenure`): settled peers rank in the first part of the budget
    beside peers with credit, by tenure on a doubling scale, older first (docs/method.md, "Tenure")."""
