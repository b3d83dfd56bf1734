"""The fetch wing: from accepted pointers to checked bodies.

- rounds.py      RoundTracker: which live peers' newest rounds are in (when a gather of a round ends)
- gatherer.py    pointers pushed or read from the DHT, screening, the inbox of accepted groups
- scheduler.py   FetchScheduler: slots per publisher, stalls and back-off, which body to fetch next
- bodies.py      the body store and the `ftis.body.v1` stream protocol (fetch with clocks, bounded serving)

Imports: the gossip and dht wings and swarm's base modules.
"""
