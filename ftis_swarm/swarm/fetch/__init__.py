"""The fetch wing: from accepted pointers to checked bodies.

- rounds.py      RoundTracker: which live peers' newest rounds are in (when a gather of a round ends)
- gatherer.py    pointers pushed or read from the DHT, screening, the inbox of accepted groups
- selection.py   Selection: with the node's budget, which offered groups to fetch (earned first, strangers at random)
- scheduler.py   FetchScheduler: slots per publisher, stalls and back-off, which body to fetch next, from whom
                 (its publisher, or a holder that announced it)
- bodies.py      the body store (own and held bodies) and the `ftis.body.v1` stream protocol (fetch with clocks,
                 bounded serving, the upload cap)

Imports: the gossip and dht wings, swarm's base modules, and peers (the policy, the intake's Budget).
"""
