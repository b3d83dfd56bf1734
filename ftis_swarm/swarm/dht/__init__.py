"""The DHT wing: records stored on the nearest peers, and what this peer keeps for others.

- codec.py        strict decoding of peers' DHT values (no extension types but hivemind's dictionary)
- validators.py   RecordChecker: envelope, key binding, RSA signature, schema, with a reason per refusal
- storage.py      GuardedStorage: what a peer keeps for others: quotas, a reserve for known publishers,
                  eviction by rank and by origin share
- origin_quota.py OriginQuotaStorage: GuardedStorage with a quota of records per network origin
- guard.py        DHTServicer: the DHT calls other peers make on this one, screened and bounded
- reading.py      KeyReader: a Kademlia lookup whose replies are decoded strictly and checked record by record
- publishing.py   sign_records, store_records: signed records on the nearest peers, counting who accepted each

Imports: swarm's base modules (records, keys, identity, counters, errors), peers, wire, config.
"""
