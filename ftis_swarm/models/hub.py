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

A hub that accepts the connection and then says nothing is not caught by the probe, and
huggingface_hub waits on it for ever (it asks for a repository's revision with no timeout
at all) or, where a request has one, retries it with a back-off, file after file.
`hub_deadline(seconds)` bounds every request to the hub made inside it: no answer, or no
next bytes of a body, for `seconds` ends the request; the first request so ended marks
the hub silent (`HubWatch.silent`), and every later one fails at once, never retried. What
was loading then fails fast, and the loader says so in one sentence (`HubSilentError`).
A request's own shorter timeout (huggingface_hub's best-effort telemetry) still ends it
as before, without marking the hub silent.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import socket
import sys
import threading
import urllib.request
from typing import Any, Iterator, Optional
from urllib.parse import urlsplit

from ftis_swarm.models.registry import ModelNotFoundError, hub_id_of, resolve_model

PROBE_SECONDS = 5.0
"""Longest wait for the hub's endpoint to accept a connection (name lookup included)."""
HUB_TIMEOUT = 60.0
"""Longest silence of the hub (no answer to a request, no next bytes of a body) in a `hub_deadline` without
seconds of its own; a node's is `hub_timeout`."""


class HubSilentError(ModelNotFoundError):
    """The hub accepted connections and then sent nothing for the deadline, and the model is not cached."""


def _offline() -> bool:
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def cached_folder(hub_id: str) -> Optional[str]:
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
    cached = cached_folder(hub_id)
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


@dataclasses.dataclass
class HubWatch:
    """The deadline of every request to the hub inside a `hub_deadline`, and whether one ran into it."""

    seconds: float
    silent: Optional[str] = None
    """`METHOD url` of the first request that got nothing for `seconds`; None while none has."""

    def silence(self) -> str:
        """What happened, for a sentence: `the hub at <endpoint> sent nothing for <seconds> s (hub_timeout)`."""
        from huggingface_hub import constants

        return f"the hub at {constants.ENDPOINT} sent nothing for {self.seconds:g} s (hub_timeout)"

    def model_error(self, what: str, hub_id: str) -> HubSilentError:
        """Why `what` (a model or its tokenizer, `hub_id` not in the hub cache) did not load, with the ways out."""
        return HubSilentError(f"{what} did not load: {self.silence()} and {hub_id} is not in the hub cache: check "
                              f"the network, the proxy or HF_ENDPOINT, or {_ways_out(hub_id, offline=False)}")


_ACTIVE: list[HubWatch] = []
"""The deadline in force: huggingface_hub's HTTP client is one per process, so is its deadline."""


@contextlib.contextmanager
def hub_deadline(seconds: Optional[float] = None) -> Iterator[HubWatch]:
    """Every request to the hub inside waits at most `seconds` (default `HUB_TIMEOUT`) for an answer or for
    the next bytes of a body, and none is tried again once one has not had them (see the module docstring).

    Inside another one, the outer deadline holds (a node's start wraps the loaders, which wrap themselves).
    On leaving, huggingface_hub's default client is put back.
    """
    if _ACTIVE:
        yield _ACTIVE[-1]
        return
    from huggingface_hub import set_client_factory
    from huggingface_hub.utils._http import default_client_factory

    watch = HubWatch(HUB_TIMEOUT if seconds is None else seconds)
    set_client_factory(functools.partial(_bounded_client, watch))
    _ACTIVE.append(watch)
    try:
        yield watch
    finally:
        _ACTIVE.pop()
        set_client_factory(default_client_factory)


_TIMEOUT_KINDS = ("connect", "read", "write", "pool")


def _bounded_client(watch: HubWatch) -> Any:
    """huggingface_hub's default client (its hooks, redirects), with each request bounded by `watch`."""
    from huggingface_hub.utils._http import default_client_factory

    template = default_client_factory()
    template.close()
    httpx: Any = sys.modules[type(template).__module__.split(".")[0]]  # httpx2 under huggingface_hub 2, else httpx

    class Silent(httpx.TransportError):
        """A request to a hub gone silent: a transport error that huggingface_hub does not retry."""

    def silenced(request: Any, exc: BaseException, ours: dict[str, bool]) -> Optional[BaseException]:
        """`Silent`, the hub marked so, when the deadline ended the request; None when its own shorter timeout did."""
        kind = next((k for k in _TIMEOUT_KINDS if type(exc).__name__.lower().startswith(k)), "read")
        if not ours[kind]:
            return None
        watch.silent = watch.silent or f"{request.method} {request.url}"
        return Silent(f"the hub sent nothing for {watch.seconds:g} s ({watch.silent})", request=request)

    class Body(httpx.SyncByteStream):
        def __init__(self, inner: Any, request: Any, ours: dict[str, bool]) -> None:
            self._inner, self._request, self._ours = inner, request, ours

        def __iter__(self) -> Iterator[bytes]:
            try:
                yield from self._inner
            except httpx.TimeoutException as exc:
                silent = silenced(self._request, exc, self._ours)
                if silent is None:
                    raise
                raise silent from exc

        def close(self) -> None:
            self._inner.close()

    class Bounded(httpx.HTTPTransport):
        def handle_request(self, request: Any) -> Any:
            if watch.silent is not None:
                raise Silent(f"the hub went silent earlier ({watch.silent})", request=request)
            asked = request.extensions.get("timeout") or {}
            ours = {k: asked.get(k) is None or asked[k] >= watch.seconds for k in _TIMEOUT_KINDS}
            request.extensions["timeout"] = {k: watch.seconds if ours[k] else asked[k] for k in _TIMEOUT_KINDS}
            try:
                response = super().handle_request(request)
            except httpx.TimeoutException as exc:
                silent = silenced(request, exc, ours)
                if silent is None:
                    raise
                raise silent from exc
            response.stream = Body(response.stream, request, ours)
            return response

    return httpx.Client(event_hooks=template.event_hooks, follow_redirects=template.follow_redirects,
                        timeout=template.timeout, transport=Bounded())
