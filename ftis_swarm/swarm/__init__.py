"""The swarm: publishing and gathering rollout groups over a hivemind DHT, without trusting peers.

The only package that imports hivemind. docs/swarm.md describes the design as built.
Imports below it: peers, wire, config and errors (never rollout, learner or node); hivemind, msgpack,
pydantic and cryptography; never torch, transformers or vllm.

- client.py      SwarmClient (start / publish_round / set_budget / gather / drain_peer_faults / counters /
                 shutdown): the hivemind transport of `peers.protocol.Swarm` (PublishResult is re-exported
                 from there), GatherFill
- bootstrap.py   BootstrapPeer and run_bootstrap: the bare DHT peer behind `ftis-node bootstrap`
- peer/          this node's own daemon: the guarded DHTNode and its pubsub p2pd on a background asyncio
                 thread (LoopThread, open_peer), its reach (modes as p2pd flags, dial-back, relay slot waits),
                 and switch_if_due / reopen_peer, which restart it in another reach mode, same identity and port
- dht/           records on the nearest peers: strict codec, validators, guarded storage, reads, stores
- gossip/        pointers on the run's gossipsub topic: pubsub control, the gate, the channel, holders' haves
- fetch/         from pointers to checked bodies: rounds, the gatherer, the selection within a budget,
                 the fetch scheduler (publishers and holders), the body protocol
- records.py     RoundPointer, GroupPointer, MemberRecord and HaveRecord schemas, subkeys, pointer and body checks
- keys.py        the key layout: per-window membership keys, per-peer pointer keys
- identity.py    the RSA identity file (peer id = record signer) and its single-process lock
- puzzle.py      what an identity costs: a memory-hard puzzle per identity and run; PuzzleVerifier
- origins.py     OriginBook: each connected peer's network origin (quotas by origin) and path (direct, relayed)
- counters.py    SwarmCounters (rejections, faults, drained per peer) and ThrottledLog
- errors.py      SwarmError: one sentence for the user

Inside: client | bootstrap > fetch > peer > gossip > dht > the base modules (an
import-linter contract). The peer policy (`peers.policy`) is the node's ledger as the
swarm sees it.
"""

from ftis_swarm.peers.policy import ALLOW_ALL, PeerPolicy
from ftis_swarm.peers.protocol import PublishResult
from ftis_swarm.swarm.client import GatherFill, SwarmClient
from ftis_swarm.swarm.errors import SwarmError

__all__ = ["ALLOW_ALL", "GatherFill", "PeerPolicy", "PublishResult", "SwarmClient", "SwarmError"]
