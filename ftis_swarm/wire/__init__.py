"""How rollouts travel between peers: wire format v2 (no torch, no hivemind here).

- group.py        Group: one prompt's G completions with their fp32 generation log-probs;
                  encode_group (its one canonical msgpack encoding), content_id, WireError
- codec.py        decode_group: the single gate from a peer's bytes (imports group.py)
- fingerprint.py  tokenizer_fingerprint: a hash of the id-to-token map

Imports below it: config only; msgpack and numpy, never torch, transformers, hivemind or vllm
(an import-linter contract): a peer's bytes are checked without any model library.
"""

from ftis_swarm.config import T_MIN
from ftis_swarm.wire.codec import T_MAX, decode_group
from ftis_swarm.wire.fingerprint import tokenizer_fingerprint
from ftis_swarm.wire.group import WIRE_VERSION, Group, WireError, WireVersionError, content_id, encode_group

__all__ = [
    "Group",
    "T_MAX",
    "T_MIN",
    "WIRE_VERSION",
    "WireError",
    "WireVersionError",
    "content_id",
    "decode_group",
    "encode_group",
    "tokenizer_fingerprint",
]
