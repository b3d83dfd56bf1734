"""The swarm: publishing and gathering rollout groups over a hivemind DHT, without trusting peers.

The only package that imports hivemind. docs/swarm.md describes the design as built.

- client.py      SwarmClient (start / publish / gather / counters / shutdown), PublishResult
- bootstrap.py   BootstrapPeer and run_bootstrap: the bare DHT peer behind `ftis-node bootstrap`
- records.py     key scheme, pointer subkeys, the GroupPointer schema, pointer and body checks
- validators.py  the record validators every peer runs (envelope, RSA signature, pointer schema)
- publishing.py  store_pointer: a signed pointer on the nearest peers, counting who accepted it
- gatherer.py    the background poller: read pointers, fetch and check bodies, hold them for gather
- bodies.py      the body store and the `ftis.body.v1` stream protocol that serves and fetches bodies
- identity.py    the RSA identity file (peer id = record signer) and its single-process lock
- runtime.py     the in-process DHTNode on a background asyncio thread (LoopThread, open_peer)
- counters.py    SwarmCounters: published, gathered, rejected by reason and by peer
- errors.py      SwarmError: one sentence for the user
"""

from ftis_swarm.swarm.client import PublishResult, SwarmClient
from ftis_swarm.swarm.errors import SwarmError

__all__ = ["PublishResult", "SwarmClient", "SwarmError"]
