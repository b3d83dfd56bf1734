"""Every reason a peer's group, record, reply or request is refused, and what it costs the peer.

One rule prices them all: **only what a peer signed can cost it.** A record or body that
contradicts its own signature or its signed pointer, a body that matches its hash and still
does not decode, a record or message that breaks the schema: an honest peer of this run
never sends one, whatever its load, distance or relay, so each costs its sender points
(`signed`). Everything else costs 0 and at most backs off fetching from the peer: what
load, a slow link, a relay, a clock, another run, version or dataset, or this node's own
state (storage or a key full, quotas, stalls, unreachable bodies, slow readers, budget
overflow, a bug of ours) can cause, and anything a peer sends while this node bans it.

Two rooms of reasons, one table (`FAULTS`, keyed by the name the ledger charges):

- the node's (`NODE`): the learner, the scorer and the intake, charged as they are named;
- the swarm's (`SWARM`): rejected pointers and groups, DHT store requests and replies,
  body fetches and body requests, gossip messages; counted by `swarm.counters` under their
  own names and charged as `swarm_<reason>`. A gossiped record refused by the record
  checker is `gossip_<reason>` and costs what the same refusal costs in the DHT
  (`gossip_twin`): a forged signature is worth as much on the topic as in a store.

Every module that raises a reason imports its constant from here; a test scans the package
for bare reason strings. A reason missing from the table costs 0 (`cost_of`), never a
default price: a new reason nobody priced must not ban an honest peer.
"""

from __future__ import annotations

import dataclasses
import logging

log = logging.getLogger(__name__)

SWARM_PREFIX = "swarm_"
GOSSIP_PREFIX = "gossip_"


@dataclasses.dataclass(frozen=True)
class Fault:
    """One reason: its name as raised and counted, its room, what it costs, and why."""

    reason: str
    room: str  # "node" or "swarm"
    cost: float
    signed: bool
    """Whether the peer signed what it is refused for (only then may it cost anything)."""

    @property
    def charged(self) -> str:
        """The name the ledger charges and a round's record counts (`charged_<name>`)."""
        return SWARM_PREFIX + self.reason if self.room == "swarm" else self.reason


FAULTS: dict[str, Fault] = {}
"""Every fault, by the name the ledger charges (`Fault.charged`)."""
NODE: dict[str, Fault] = {}
SWARM: dict[str, Fault] = {}


def _add(room: dict[str, Fault], name: str, reason: str, cost: float) -> str:
    if reason in room:
        raise ValueError(f"fault reason {reason!r} is listed twice")
    fault = Fault(reason=reason, room=name, cost=cost, signed=cost > 0)
    room[reason] = FAULTS[fault.charged] = fault
    return reason


def _node(reason: str, cost: float = 0.0) -> str:
    return _add(NODE, "node", reason, cost)


def _swarm(reason: str, cost: float = 0.0) -> str:
    return _add(SWARM, "swarm", reason, cost)


# Prices, in points (`LedgerConfig.ban_threshold`, 20 by default, bans).
FORGED = 20.0
"""A group no honest learner could have produced: one bans at once."""
CONTRADICTS = 10.0
"""A record or body that contradicts its signature or its signed pointer."""
SCHEMA = 5.0
"""A signed record, message, reply or group that breaks the schema or names what no honest peer trains on."""

# --- the node's: the learner (learner/learner.py) -------------------------------------------------
FORGERY = _node("forgery", FORGED)
NONFINITE = _node("nonfinite", FORGED)
TEMPERATURE = _node("temperature", FORGED)
GROUP_MALFORMED = _node("malformed", CONTRADICTS)
OUT_OF_VOCAB = _node("out_of_vocab", CONTRADICTS)
TOKENIZER = _node("tokenizer")  # another tokenizer: another run, not a fault
LEARN_ERROR = _node("learn_error")  # the forward pass raised: this node's memory or a bug of ours
# --- the scorer (node/scoring.py) ------------------------------------------------------------------
EVAL_TASK = _node("eval_task", SCHEMA)
ITEM_OUT_OF_RANGE = _node("item_out_of_range", SCHEMA)
NOT_TRAIN_SPLIT = _node("not_train_split", SCHEMA)
PROMPT_MISMATCH = _node("prompt_mismatch", SCHEMA)
PROMPT_TOO_LONG = _node("prompt_too_long", SCHEMA)
DECODE_ERROR = _node("decode_error", SCHEMA)
ITEM_ERROR = _node("item_error")  # the task's lookup raised: our code
SCORE_ERROR = _node("score_error")  # the verifier raised: our code
EOS_TAIL = _node("eos_tail")  # tokens after an EOS: an honest sampler stops there, but its EOS set may differ
UNKNOWN_ITEM = _node("unknown_item")  # another dataset version
UNKNOWN_TASK = _node("unknown_task")  # a task this version does not know
TASK_NOT_ACCEPTED = _node("task_not_accepted")  # an honest peer on another task
HINT_CONTRADICTED = _node("hint_contradicted", CONTRADICTS)
"""The hint its signed pointer gave (its count of a group's correct answers) differs from this node's verifier
by more than an honest verifier can (`node.hints.contradicts`): a lie to be fetched first."""
TASK_DIGEST = _node("task_digest")  # the same task name with other content (data, generator, verifier): a mismatch
# --- a group of another tokenizer (node/scoring.py, learner/aligned.py; docs/method.md) -------------
ALIGN_BYTES = _node("align_bytes", CONTRADICTS)  # its signed byte lengths do not sum to its signed text
ALIGN_UTF8 = _node("align_utf8", CONTRADICTS)  # its signed text is not UTF-8
ALIGN_TOO_LONG = _node("align_too_long")  # re-encodes past this learner's limit: honest, a mismatch
# --- the intake (peers/intake.py): what this node takes, never a fault ----------------------------
PEER_TOO_LONG = _node("peer_too_long")
PEER_OVER_BUDGET = _node("peer_over_budget")
PEER_OVER_CAP = _node("peer_over_cap")
PEER_ALREADY_CONSUMED = _node("peer_already_consumed")
PEER_DEFERRED = _node("peer_deferred")
PEER_REFUSED = _node("peer_refused")
PEER_DUPLICATE = _node("peer_duplicate")  # the same sender's content again, under a new id
PEER_OVER_SHARE = _node("peer_over_share")  # past the strangers' share of the budget (lost the draw)
COPIED_GROUP = _node("copied_group")  # another sender's content with the first's log-probs: not trained, free
SAME_CONTENT = _node("same_content")  # another sender's content with other log-probs (a coincidence): free
CONTESTED_GROUP = _node("contested_group")  # kept, but another sender offered its content in the same take: no credit

# --- the swarm's: pointers screened before download (swarm/records.py, fetch/gatherer.py) ---------
RUN_ID = _swarm("run_id")
POINTER_TOKENIZER = _swarm("tokenizer")
STALE = _swarm("stale")
FUTURE = _swarm("future")  # a clock ahead
OVERSIZE = _swarm("oversize")  # larger than this node's `wire.max_bytes`
DENIED = _swarm("denied")  # this node bans or denies the peer
# --- body fetches (fetch/streams.py, fetch/outcomes.py): each failed answer, then the pointers ----
BODY_UNREACHABLE = _swarm("body_unreachable")
BODY_MISSING = _swarm("body_missing")
BODY_BROKEN = _swarm("body_broken")
BODY_STALLED = _swarm("body_stalled")
BODY_BUSY = "body_busy"
"""Not counted at all: the publisher serves others; the fetch waits a poll."""
BODY_BAD_STATUS = _swarm("body_bad_status")  # an unsigned status byte: backs off, costs nothing
FETCH_FAILED = _swarm("fetch_failed")
STALLED = _swarm("stalled")
FETCH_ERROR = _swarm("fetch_error")  # a bug of ours, logged
# --- bodies that contradict their signed pointer (swarm/records.py:check_body) --------------------
SIZE_MISMATCH = _swarm("size_mismatch", CONTRADICTS)
HASH_MISMATCH = _swarm("hash_mismatch", CONTRADICTS)
BODY_MALFORMED = _swarm("malformed", CONTRADICTS)  # matches its hash, and the wire decoder refuses it
SENDER_MISMATCH = _swarm("sender_mismatch", CONTRADICTS)
POINTER_MISMATCH = _swarm("pointer_mismatch", CONTRADICTS)
# --- requests for this node's bodies (fetch/streams.py:serve_bodies): load and links ------------
TOO_MANY_STREAMS = _swarm("too_many_streams")
BAD_REQUEST = _swarm("bad_request")
SLOW_REQUEST = _swarm("slow_request")
SLOW_READER = _swarm("slow_reader")
BROKEN_REQUEST = _swarm("broken_request")
SERVE_ERROR = _swarm("serve_error")
# --- records: the record checker (dht/validators.py), in a store, a reply or a gossip message ----
BAD_SIGNATURE = _swarm("bad_signature", CONTRADICTS)
OWNER_MISMATCH = _swarm("owner_mismatch", CONTRADICTS)
UNBOUND_KEY = _swarm("unbound_key", SCHEMA)
BAD_SCHEMA = _swarm("bad_schema", SCHEMA)
NOT_POINTER_FORM = _swarm("not_pointer_form", SCHEMA)
OVERSIZE_RECORD = _swarm("oversize_record")  # this node's `max_record_bytes`
FAR_EXPIRY = _swarm("far_expiry")  # a clock ahead
OLD_VERSION = _swarm("old_version")  # a peer on an older release: another protocol, not a fault
BAD_PUZZLE = _swarm("bad_puzzle", SCHEMA)  # a signed record whose identity puzzle (swarm/puzzle.py) fails
PUZZLE_BUSY = "puzzle_busy"
"""Not charged: new identities came faster than this node verifies puzzles (counted, no one's fault)."""
RECORD_REASONS = (BAD_SIGNATURE, OWNER_MISMATCH, UNBOUND_KEY, BAD_SCHEMA, NOT_POINTER_FORM, OVERSIZE_RECORD,
                  FAR_EXPIRY, OLD_VERSION, BAD_PUZZLE)
# --- DHT store requests (dht/guard.py, dht/storage.py): this node's room, hivemind's own pushes ---
OWNER_QUOTA = _swarm("owner_quota")
REQUESTER_QUOTA = _swarm("requester_quota")
KEY_FULL = _swarm("key_full")
STORAGE_FULL = _swarm("storage_full")
ORIGIN_QUOTA = _swarm("origin_quota")  # the requester's network origin holds its share (dht/origin_quota.py)
STORE_RATE = _swarm("store_rate")  # records past the requester's store rate (dht/guard.py)
CACHE_STORE = _swarm("cache_store")  # hivemind caches on its own
REGULAR_VALUE = _swarm("regular_value")
MALFORMED_REQUEST = _swarm("malformed_request")
STORE_ERROR = _swarm("store_error")  # a bug of ours, logged
OVERSIZED_REQUEST = _swarm("oversized_request")
BAD_ENCODING = _swarm("bad_encoding", SCHEMA)
NOT_NEWER = "not_newer"
EXPIRED = "expired"
"""Storage outcomes that are no refusal (a later version held; an expired record): never counted."""
# --- DHT replies (dht/reading.py) ------------------------------------------------------------------
DHT_NO_REPLY = _swarm("dht_no_reply")
BAD_REPLY = _swarm("bad_reply", SCHEMA)
OVERSIZED_REPLY = _swarm("oversized_reply")
MEMBER_OVERCLAIM = _swarm("member_overclaim")  # its stores may have been refused as storage_full
# --- gossip messages (gossip/gate.py): the gate's own, then the record checker's twins -----------
GOSSIP_BANNED = _swarm("gossip_banned")
GOSSIP_DENIED = _swarm("gossip_denied")
GOSSIP_RATE = _swarm("gossip_rate")
GOSSIP_REPLAYED = _swarm("gossip_replayed")
GOSSIP_OVERSIZE = _swarm("gossip_oversize", SCHEMA)
GOSSIP_BAD_MESSAGE = _swarm("gossip_bad_message", SCHEMA)
GOSSIP_NOT_POINTER = _swarm("gossip_not_pointer", SCHEMA)
GOSSIP_NOT_SENDER = _swarm("gossip_not_sender", SCHEMA)
for _reason in RECORD_REASONS:
    _swarm(GOSSIP_PREFIX + _reason, SWARM[_reason].cost)
del _reason


def gossip_twin(record_reason: str) -> str:
    """The gossip fault of a record refusal (`bad_signature` -> `gossip_bad_signature`), priced alike."""
    twin = GOSSIP_PREFIX + record_reason
    if twin not in SWARM:
        raise KeyError(f"{record_reason!r} is no record refusal")
    return twin


_warned: set[str] = set()


def cost_of(charged: str) -> float:
    """Points for one fault by its charged name (`Fault.charged`); 0 for a name the table lacks."""
    fault = FAULTS.get(charged)
    if fault is None:
        if charged not in _warned:
            _warned.add(charged)
            log.warning("fault reason %r has no price in peers/faults.py; it costs 0", charged)
        return 0.0
    return fault.cost
