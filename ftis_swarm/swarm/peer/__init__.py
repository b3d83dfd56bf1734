"""The peer wing: this node's own libp2p daemon and DHT peer, its start, and how peers reach it.

- loop.py       LoopThread: the asyncio event loop the daemon and the DHT node live on, in a daemon thread
- daemon.py     p2pd and the guarded DHT node (start_dht, guard_node), visible multiaddrs, the wait for a
                relayed node's relay slot
- handle.py     PeerHandle: a started peer (identity, puzzle, loop, node, checker, counters, origins, reach)
- start.py      open_peer: identity, the `auto` mode's dial-back probe and the retries after it, the start,
                the services (answering dial-backs, the rechecks)
- switch.py     reopen_peer and switch_if_due: a running `auto` node restarted in the other mode in place
- reach.py      reachability modes (public, relayed, client) as p2pd flags; the bounded relay service
- dialback.py   `ftis.dialback.v1`: a public peer tells a starting `auto` node whether its port is reachable;
                Reachability (the node's own reach) and the rechecks of a running node

Imports: the gossip wing (its pubsub daemon), the dht wing (the guards) and swarm's base
modules (identity, puzzle, origins, counters, errors); never fetch.
"""
