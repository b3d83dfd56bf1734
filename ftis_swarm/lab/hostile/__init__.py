"""A hostile peer for the tests and `bench hostile` / `bench attacks`; the product never imports it.

- peer.py     Hostile (`python -m ftis_swarm.lab.hostile.peer`): its own daemon and keys, signing
              records and serving bodies as a forger would
- base.py     Signer (an identity that signs records) and HostilePeer (what the floods read of the peer)
- floods.py   its floods of records and its bad body servers
- gossip.py   its gossip flood: raw gossipsub streams, messages signed by any of its identities
- groups.py   the hostile groups a peer can make with valid signatures, built from honest ones
- relay_push.py a hostile relayed pair: a pusher that floods a relay's circuit to its own sink

With `swarm` and two benches (`lab/bench/have_flood.py`, `lab/bench/storage_memory.py`), the only code
that may import hivemind (an import contract holds it: tests/test_layers.py).
"""
