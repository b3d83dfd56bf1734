"""Where a node's numbers go: one sink interface, never print from library code.

- sink.py        MetricsSink (the interface), JsonlSink (one JSON line per round), MultiSink
- prometheus.py  PrometheusSink: the latest round as gauges on a local /metrics endpoint
"""

from ftis_swarm.metrics.sink import JsonlSink, MetricsSink, MultiSink, read_jsonl

__all__ = ["JsonlSink", "MetricsSink", "MultiSink", "read_jsonl"]
