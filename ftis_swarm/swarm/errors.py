"""The one exception the swarm raises for conditions a user can fix (a bad address, a busy identity)."""

from __future__ import annotations

from ftis_swarm.errors import UserError


class SwarmError(UserError, RuntimeError):
    """Joining or running the swarm failed; the message is one sentence for the user."""


class PeersUnreachable(SwarmError):
    """p2pd could connect to none of the `--peers` when it started."""
