"""The gossip wing: pointers (and holders' haves) pushed on the run's gossipsub topic.

- pubsub.py    gossipsub in hivemind's p2pd (PubsubP2P) and its control requests (subscribe, Publisher, ...)
- gate.py      the gossip message (one signed record) and GossipGate: replays dropped uncharged, rate per sender,
               bans, record checks, a bounded queue of records refused as puzzle_busy checked again
- channel.py   GossipChannel: the run's topic on this peer (pointers out, peers' pointers in, connections)
- haves.py     HaveAnnouncer: a holder's signed `HaveRecord` of the bodies it holds, every `have_interval` s

Imports: the dht wing (record checks, reading) and swarm's base modules; never fetch.
"""
