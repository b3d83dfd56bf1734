"""The fetch wing: from accepted pointers to checked bodies.

- pointers.py    PointerTable: one record per (publisher, group id), its phase (offered, chosen, fetching,
                 accepted, rejected, passed), leg times, attempts and tier; the only writer of its transitions
- expiring.py    ExpiringMap: the table's settled records, bounded, forgotten in insertion order
- rounds.py      RoundTracker: which live peers' newest rounds are in (when a gather of a round ends)
- gatherer.py    pointers pushed or read from the DHT, screening, the inbox of accepted groups
- selection.py   Selection: with the node's budget, which offered groups to fetch (earned first, strangers at random)
- scheduler.py   FetchScheduler: stream slots per publisher, which bodies to fetch next together, from whom
                 (its publisher, or a holder that announced them)
- legs.py        Legs: where a chosen group's publish-to-visible went at this node (seen, chosen, slot, stream, body,
                 check), as its record's times
- outcomes.py    what each pointer's answer does: accepted, refused, unavailable (stalls and back-off), from a holder
- holders.py     HolderBook: the holders that announced a group, their suspensions and failures
- streams.py     the `ftis.body.v2` stream protocol, several bodies per stream (fetch with a clock per body,
                 bounded serving)
- bodies.py      the body store (own and held bodies) and the upload cap

Imports: the peer wing (reach: relay circuits, p2pd's dial backoff), the gossip and dht wings, swarm's base
modules, and peers (the policy, the intake's Budget).
"""
