"""Whether a hub model can load here: from the hub cache, from the hub, or not at all (at once).

transformers asks the hub about a model even when it is cached, and on a machine whose
network is down it retries each request with a back-off before it gives up: over a minute
of warnings before one sentence. `hub_source` answers first, in at most
`PROBE_SECONDS` (one TCP connection to the hub's endpoint, through the proxy the
environment names), and says where to load from:

- cached, hub reachable: the hub id, as usual (transformers may fetch a newer revision);
- cached, hub not reachable, or `HF_HUB_OFFLINE` set: the cached snapshot's folder, so no
  request is made (transformers' own `local_files_only` still asks the hub about adapters);
- not cached and not reachable (or offline): `ModelNotFoundError`, one sentence naming the
  ways out: a local checkpoint folder, the cache filled where the hub is reachable,
  `HF_HUB_OFFLINE`.

"Cached" means the model's `config.json` is in the hub cache (`HF_HOME`, `HF_HUB_CACHE`);
weights missing beside it still fail in transformers, with its own sentence. The probe's
answer is kept for the process (a node checks before it loads, then loads).
"""

from __future__ import annotations

import functools
import os
import socket
import threading
import urllib.request
from typing import Optional
from urllib.parse import urlsplit

from ftis_swarm.models.registry import ModelNotFoundError, hub_id_of, resolve_model

PROBE_SECONDS = 5.0
"""Longest wait for the hub's endpoint to accept a connection (name lookup included)."""


def _offline() -> bool:
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def _cached(hub_id: str) -> Optional[str]:
    """The folder of the cached snapshot holding `hub_id`'s config.json, or None."""
    from huggingface_hub import try_to_load_from_cache

    config = try_to_load_from_cache(hub_id, "config.json")
    return os.path.dirname(config) if isinstance(config, str) else None


def _endpoint() -> tuple[str, str, int]:
    """`(endpoint's host, host to connect to, port)`: the proxy's when the environment names one."""
    from huggingface_hub import constants

    url = urlsplit(constants.ENDPOINT)
    target = url
    proxy = urllib.request.getproxies().get(url.scheme)
    if proxy and not urllib.request.proxy_bypass(url.hostname or ""):
        target = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
    port = target.port or (443 if target.scheme == "https" else 80)
    return url.hostname or "", target.hostname or "", port


@functools.lru_cache(maxsize=None)
def unreachable_reason(host: str, port: int, timeout: float = PROBE_SECONDS) -> Optional[str]:
    """None when `host:port` accepts a TCP connection within `timeout`, else why not, in a few words.

    The connection is tried in a thread: a name lookup does not obey a socket's timeout.
    """
    outcome: list[Optional[str]] = []

    def attempt() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            outcome.append(None)
        except OSError as exc:
            outcome.append(exc.strerror or str(exc) or type(exc).__name__)

    thread = threading.Thread(target=attempt, name="hub-probe", daemon=True)
    thread.start()
    thread.join(timeout)
    return outcome[0] if outcome else f"no answer within {timeout:.0f} s"


def _ways_out(hub_id: str, *, offline: bool) -> str:
    folder = "give --model a local checkpoint folder"
    fill = f"fill the hub cache where the hub is reachable (`hf download {hub_id}` with the same HF_HOME)"
    return f"{folder}, or {fill}" if offline else f"{folder}, or {fill} and set HF_HUB_OFFLINE=1 to load from it alone"


def hub_source(hub_id: str, name: str) -> str:
    """Where `hub_id` loads from: itself, or its cached folder; raises `ModelNotFoundError` when from nowhere.

    `name`: what the user typed, for the sentence.
    """
    cached = _cached(hub_id)
    if _offline():
        if cached:
            return cached
        raise ModelNotFoundError(f"model {name!r} ({hub_id}) is not in the hub cache and HF_HUB_OFFLINE is set: "
                                 + _ways_out(hub_id, offline=True))
    endpoint, host, port = _endpoint()
    reason = unreachable_reason(host, port)
    if reason is None:
        return hub_id
    if cached:
        return cached
    via = "" if host == endpoint else f" through the proxy {host}:{port}"
    raise ModelNotFoundError(f"model {name!r} ({hub_id}) is not in the hub cache and {endpoint} cannot be reached"
                             f"{via} ({reason}): {_ways_out(hub_id, offline=False)}")



def check_model_reachable(name: str) -> None:
    """Refuses, in one sentence and in seconds, a hub model neither cached nor reachable (`hub_source`)."""
    hub_id = hub_id_of(name)
    if hub_id is not None:
        hub_source(hub_id, name)


def loadable_model(name: str) -> str:
    """`resolve_model(name)`, with a hub id checked first: its cached folder when the hub is not to be asked
    (offline, or unreachable), and `ModelNotFoundError` in seconds when it is neither cached nor reachable."""
    hub_id = hub_id_of(name)
    return resolve_model(name) if hub_id is None else hub_source(hub_id, name)
