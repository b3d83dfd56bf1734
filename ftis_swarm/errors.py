"""The base of every error a user can cause; the bottom of the layering (standard library only).

Each layer raises its own subclass (`config.ConfigError`, `models.ModelNotFoundError`,
`tasks.UnknownTaskError`, `swarm.SwarmError`, `learner.checkpoint.CheckpointError`, ...),
with a message that is one sentence naming what to fix. The CLI catches `UserError` in one
place and prints `error: <message>` with exit status 2, never a traceback. It lives apart
from `config` so that the CLI can name it without importing pydantic (`--help` stays fast).
"""

from __future__ import annotations


class UserError(Exception):
    """An error the user can fix (a flag, a config, a name, a file, a port): one sentence, exit 2."""
