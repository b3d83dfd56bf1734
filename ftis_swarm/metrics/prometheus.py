"""A Prometheus `/metrics` endpoint with the node's rounds, by Prometheus's naming conventions.

A round's record (docs/node.md) becomes (`metric_of` is the mapping, tested on its own):

- counts of a round (`published`, `gathered`, `peer_over_cap`, `rejected_<reason>`, ...):
  counters, `ftis_..._total`, the reason as a `reason` label;
- the swarm's running totals (`swarm_rejected_<reason>`, `swarm_fetched_bytes`): counters
  advanced by their increase since the last round;
- times (`time_<x>`, seconds): gauges `ftis_<x>_seconds` of the last round;
- docs/method.md's metrics and every other number: gauges `ftis_<key>` of the last round; the
  per-source values `key@source` apart from them, as `ftis_<key>_by_peer{peer="<source>"}`
  (`self` for this node's own samples);
- a list (`banned_peers`): a gauge of its length;
- the held-out accuracy: `heldout_acc` (the node's own task) the gauge `ftis_heldout_acc`, each
  further task's `heldout_acc_<task>` the gauge `ftis_heldout_acc_by_task{task="<task>"}`,
  set in the rounds evaluated (round 0's record, the evaluation before any update, is
  not counted in `ftis_rounds_total`).

The default process, platform and GC metrics are served too. Each sink owns its registry,
so two nodes in one process (tests, the experiment) do not collide. A port that cannot be
bound is a `MetricsSinkError`, one sentence.
"""

from __future__ import annotations

import re
from typing import Any, Literal, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from ftis_swarm.metrics.sink import MetricsSinkError, Value

_BAD = re.compile(r"[^a-zA-Z0-9_]")
Kind = Literal["gauge", "counter", "running_total"]

_ROUND_COUNTS = {
    "published": "groups_published",
    "publish_failed": "groups_publish_failed",
    "own_groups": "own_groups",
    "peer_groups": "peer_groups_used",
    "gathered": "peer_groups_gathered",
    "prompt_rejected": "prompts_rejected",
    "update_failed": "updates_failed",
}
"""Per-round counts -> counter names (without `ftis_` and `_total`)."""
_REASON_COUNTS = (("peer_", "peer_groups_dropped", ("already_consumed", "over_cap", "too_long", "duplicate")),
                  ("rejected_", "groups_unscored", None))
"""`(key prefix, counter, reasons or None for any)`: per-round counts with a reason."""
_RUNNING_TOTALS = {"swarm_fetched_bytes": "swarm_fetched_bytes", "swarm_served_bytes": "swarm_served_bytes"}


def _clean(name: str) -> str:
    return _BAD.sub("_", name)


def metric_of(key: str) -> tuple[Kind, str, dict[str, str]]:
    """`(kind, metric name, labels)` of a record key; counters named without `_total` (the client adds it)."""
    name, at, source = key.partition("@")
    if at:
        return "gauge", f"ftis_{_clean(name)}_by_peer", {"peer": source}
    if name in _ROUND_COUNTS:
        return "counter", f"ftis_{_ROUND_COUNTS[name]}", {}
    for prefix, counter, reasons in _REASON_COUNTS:
        reason = name[len(prefix):]
        if name.startswith(prefix) and (reasons is None or reason in reasons):
            return "counter", f"ftis_{counter}", {"reason": reason}
    if name.startswith("swarm_rejected_"):
        return "running_total", "ftis_swarm_groups_rejected", {"reason": name[len("swarm_rejected_"):]}
    if name in _RUNNING_TOTALS:
        return "running_total", f"ftis_{_RUNNING_TOTALS[name]}", {}
    if name.startswith("heldout_acc_"):
        return "gauge", "ftis_heldout_acc_by_task", {"task": name[len("heldout_acc_"):]}
    if name == "time":
        return "gauge", "ftis_last_round_timestamp_seconds", {}
    if name.startswith("time_"):
        return "gauge", f"ftis_{_clean(name[len('time_'):])}_seconds", {}
    return "gauge", f"ftis_{_clean(name)}", {}


class PrometheusSink:
    def __init__(self, port: int, *, host: str = "127.0.0.1") -> None:
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        self._metrics: dict[str, Any] = {}
        self._last_total: dict[tuple[str, tuple], float] = {}
        self._rounds = Counter("ftis_rounds", "Rounds this process has finished.", registry=self.registry)
        try:
            self._server, self._thread = start_http_server(port, addr=host, registry=self.registry)
        except OSError as exc:
            raise MetricsSinkError(
                f"cannot serve metrics on {host}:{port} ({exc.strerror or exc}); give another --metrics-port, "
                "or 0 for any free one"
            ) from None
        self.port = self._server.server_port

    def log(self, record: Mapping[str, Value]) -> None:
        for key, value in record.items():
            if isinstance(value, (list, tuple)):
                value = len(value)
            if isinstance(value, bool):
                value = float(value)
            if isinstance(value, (int, float)):
                self._observe(key, float(value))
        if record.get("round"):  # round 0 is the evaluation before any update
            self._rounds.inc()

    def _observe(self, key: str, value: float) -> None:
        kind, name, labels = metric_of(key)
        metric = self._metrics.get(name)
        if metric is None:
            cls = Gauge if kind == "gauge" else Counter
            metric = cls(name, f"ftis-swarm: {key.partition('@')[0]} (docs/node.md)", list(labels),
                         registry=self.registry)
            self._metrics[name] = metric
        child = metric.labels(**labels) if labels else metric
        if kind == "gauge":
            child.set(value)
        elif kind == "counter":
            child.inc(max(value, 0.0))
        else:
            where = (name, tuple(sorted(labels.items())))
            increase = value - self._last_total.get(where, 0.0)
            self._last_total[where] = value
            child.inc(max(increase, 0.0))

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
