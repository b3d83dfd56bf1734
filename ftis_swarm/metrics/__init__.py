"""Where a node's numbers go: one sink interface, never print from library code.

- sink.py         MetricsSink (the interface), JsonlSink (one JSON line per round), MultiSink,
                  MetricsSinkError (a sink that cannot start: one sentence)
- prometheus.py   PrometheusSink: a /metrics endpoint by Prometheus's conventions (counters
                  `_total`, times `_seconds`, peer and reason labels, process metrics)
- extra_sinks.py  TensorBoardSink and WandbSink, each an optional package (`check_installed`)
- procstat.py     what a process holds, from /proc: resident memory and its peak, open files,
                  child processes (the multi-process benches watch a testnet with it)

Imports below it: errors only (prometheus_client, and torch's TensorBoard writer or wandb
when those sinks are asked for).
"""

from ftis_swarm.metrics.sink import JsonlSink, MetricsSink, MetricsSinkError, MultiSink, read_jsonl

__all__ = ["JsonlSink", "MetricsSink", "MetricsSinkError", "MultiSink", "read_jsonl"]
