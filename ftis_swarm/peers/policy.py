"""What the swarm asks of the node's peer ledger: may this peer be served, and how much is it worth.

The swarm cannot import the node (layers), so it takes anything with these two methods
(the node's `PeerLedger`); `ALLOW_ALL` is the default. Both are called on the swarm's event
loop thread, often (every stored record, every scheduled fetch): they must be cheap and
thread-safe, and must not block.

- `allows(peer_id)` False: nothing is fetched from that peer, stored for it, or served to it.
- `score(peer_id)` > 0: a peer whose groups were used. Its records are never evicted to
  make room for a stranger's, and its bodies are fetched first.

The ledger learns what the swarm saw from `SwarmClient.drain_peer_faults()`.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class PeerPolicy(Protocol):
    def allows(self, peer_id: str) -> bool: ...

    def score(self, peer_id: str) -> float: ...


class AllowAll:
    """Every peer allowed, none with a score: the policy of a bootstrap peer or a node without a ledger."""

    def allows(self, peer_id: str) -> bool:
        return True

    def score(self, peer_id: str) -> float:
        return 0.0


ALLOW_ALL: PeerPolicy = AllowAll()
