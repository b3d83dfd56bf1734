"""The swarm: publishing and gathering rollout groups over a hivemind DHT, without trusting peers.

The only package that imports hivemind. docs/swarm.md describes the design as built.
Imports below it: wire, config and errors (never rollout, learner or node); hivemind, msgpack,
pydantic and cryptography; never torch, transformers or vllm.

- client.py         SwarmClient (start / publish / gather / drain_peer_faults / counters / shutdown), PublishResult
- policy.py         PeerPolicy (the node's ledger, as the swarm sees it) and ALLOW_ALL
- bootstrap.py      BootstrapPeer and run_bootstrap: the bare DHT peer behind `ftis-node bootstrap`
- keys.py           the key layout: per-window membership keys, per-peer pointer keys
- records.py        GroupPointer and MemberRecord schemas, subkeys, pointer and body checks
- validators.py     RecordChecker: envelope, key binding, RSA signature, schema, with a reason per refusal
- dhtcodec.py       strict decoding of peers' DHT values (no extension types but hivemind's dictionary)
- guard.py          DHTServicer: the DHT calls other peers make on this one, screened and bounded
- storage.py        GuardedStorage: what a peer keeps for others, with quotas and rank-ordered eviction
- reading.py        KeyReader: a Kademlia lookup whose replies are decoded strictly and checked record by record
- publishing.py     sign_records, store_records: signed records on the nearest peers, counting who accepted each
- pubsub.py         gossipsub in hivemind's p2pd (PubsubP2P) and its control requests (subscribe, Publisher, ...)
- gossip.py         the gossip message (one signed record) and GossipGate: rate per sender, bans, record checks
- channel.py        GossipChannel: the run's topic on this peer (pointers out, peers' pointers in, connections)
- rounds.py         RoundTracker: which live peers' newest rounds are in (when a gather of a round ends)
- gatherer.py       pointers pushed or read from the DHT, screening, the inbox of accepted groups
- fetching.py       FetchScheduler: slots per publisher, stalls and back-off, which body to fetch next
- bodies.py         the body store and the `ftis.body.v1` stream protocol (fetch with clocks, bounded serving)
- identity.py       the RSA identity file (peer id = record signer) and its single-process lock
- runtime.py        the in-process, guarded DHTNode on a background asyncio thread (LoopThread, open_peer)
- counters.py       SwarmCounters (rejections, faults, drained per peer) and ThrottledLog
- errors.py         SwarmError: one sentence for the user
- hostile.py        a hostile peer (`python -m ftis_swarm.swarm.hostile`) for the tests and `bench hostile`
- hostile_floods.py its floods and bad body servers
- hostile_gossip.py its gossip flood: raw gossipsub streams, messages signed by any of its identities
"""

from ftis_swarm.swarm.client import PublishResult, SwarmClient
from ftis_swarm.swarm.errors import SwarmError
from ftis_swarm.swarm.policy import ALLOW_ALL, PeerPolicy

__all__ = ["ALLOW_ALL", "PeerPolicy", "PublishResult", "SwarmClient", "SwarmError"]
