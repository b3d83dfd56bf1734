"""A Prometheus `/metrics` endpoint with the node's latest round, as gauges.

`name@source` becomes gauge `ftis_name{source="..."}`; other characters outside
`[a-zA-Z0-9_]` become `_`. Strings are skipped. Each sink owns its registry, so two nodes
in one process (tests, the experiment) do not collide.
"""

from __future__ import annotations

import re
from typing import Mapping

from prometheus_client import CollectorRegistry, Gauge, start_http_server

from ftis_swarm.metrics.sink import Value

_BAD = re.compile(r"[^a-zA-Z0-9_]")


def metric_name(key: str) -> tuple[str, str]:
    """`"time/learn@peer"` -> (`"ftis_time_learn"`, `"peer"`)."""
    name, _, source = key.partition("@")
    return "ftis_" + _BAD.sub("_", name), source


class PrometheusSink:
    def __init__(self, port: int, *, host: str = "127.0.0.1") -> None:
        self.registry = CollectorRegistry()
        self._gauges: dict[str, Gauge] = {}
        self._server, self._thread = start_http_server(port, addr=host, registry=self.registry)
        self.port = self._server.server_port

    def log(self, record: Mapping[str, Value]) -> None:
        for key, value in record.items():
            if isinstance(value, bool):
                value = float(value)
            if not isinstance(value, (int, float)):
                continue
            name, source = metric_name(key)
            gauge = self._gauges.get(name)
            if gauge is None:
                gauge = Gauge(name, f"ftis-swarm metric {name[5:]}", ["source"], registry=self.registry)
                self._gauges[name] = gauge
            gauge.labels(source=source).set(float(value))

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
