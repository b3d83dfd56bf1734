"""The Grafana dashboard and its provisioning: every query names a metric a real node exports.

The exported names are read from the registry of the real Prometheus sink of a real node (a
tiny model, alone on 127.0.0.1, one round), and, for the counters that only appear once
something is rejected or dropped, from the same sink fed one of each reason the fault
table knows (peers/faults.py) (the keys the swarm and the intake report), never from a list written here.
The compose file wires Prometheus to every node's port and Grafana to both.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from ftis_swarm.config import load_node_config
from ftis_swarm.node.daemon import Node
from ftis_swarm.peers.faults import NODE, SWARM

pytestmark = pytest.mark.net

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
BOARD = json.loads((DEPLOY / "grafana" / "dashboards" / "ftis-node.json").read_text())
COMPOSE = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
METRIC = re.compile(r"\b((?:ftis|process)_[a-z0-9_]+)\b")


def queries() -> list[str]:
    return [t["expr"] for p in BOARD["panels"] for t in p["targets"]]


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> set[str]:
    from ftis_swarm.models.tiny import build_tiny_qwen2

    tmp = tmp_path_factory.mktemp("dashboard")
    model = build_tiny_qwen2(tmp / "model", hidden_size=32, num_layers=1, seed=3)
    cfg = load_node_config(None, {"model": str(model), "run_dir": str(tmp / "run"), "rounds": 1,
                                  "prompts_per_round": 1, "sampling.group_size": 2, "sampling.max_new_tokens": 4,
                                  "round_deadline": 0.2, "swarm.transport.host": "127.0.0.1", "threads": 1, "metrics_port": 0,
                                  "eval_tasks": ["arith_mix"]})  # a held-out curve of a further task too
    node = Node(cfg)
    (sink,) = [s for s in node.parts.sink.sinks if hasattr(s, "registry")]
    node.run()
    reasons = {f"swarm_rejected_{r}": 1 for r in SWARM}
    reasons.update({r: 1 for r in NODE if r.startswith("peer_")})
    reasons.update({f"rejected_{r}": 1 for r in NODE if not r.startswith("peer_")})
    sink.log(reasons)
    return {sample.name for family in sink.registry.collect() for sample in family.samples}


def test_every_query_names_metrics_the_node_exports(exported):
    assert "ftis_reward" in exported and "process_resident_memory_bytes" in exported  # the registry was read
    named = set()
    for expr in queries():
        names = set(METRIC.findall(expr))
        assert names, f"a query names no metric: {expr}"
        assert names <= exported, f"{expr}: {sorted(names - exported)} not exported by the node"
        named |= names
    # the panels the issues ask for: held-out accuracy, reward, filtered share, ESS, peer share, round phases,
    # faults, bans, memory
    for metric in ("ftis_heldout_acc", "ftis_heldout_acc_by_task", "ftis_reward", "ftis_frac_filtered", "ftis_ess", "ftis_offpolicy_sequences", "ftis_generate_seconds",
                   "ftis_gather_seconds", "ftis_learn_seconds", "ftis_swarm_groups_rejected_total",
                   "ftis_peers_banned", "process_resident_memory_bytes"):
        assert metric in named, metric


def test_a_misspelt_query_would_be_caught(exported):
    assert not set(METRIC.findall("rate(ftis_rounds_totl[5m])")) <= exported


def test_compose_provisions_prometheus_and_grafana_for_every_node():
    services = COMPOSE["services"]
    prom = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    (job,) = prom["scrape_configs"]
    targets = {t for sc in job["static_configs"] for t in sc["targets"]}
    nodes = {n for n, svc in services.items() if svc.get("command", [None])[0] == "join"}
    assert targets == {f"{n}:9100" for n in nodes} and len(nodes) == 4
    assert all("--metrics-port" in services[n]["command"] for n in nodes)
    # the dashboard's memory panel picks the nodes by this job's name
    assert any(f'job="{job["job_name"]}"' in q for q in queries())

    mounts = {v.split(":")[1]: v.split(":")[0] for v in services["prometheus"]["volumes"]}
    assert mounts["/etc/prometheus/prometheus.yml"] == "./prometheus/prometheus.yml"
    g_mounts = {v.split(":")[1]: v.split(":")[0] for v in services["grafana"]["volumes"]}
    assert g_mounts["/etc/grafana/provisioning"] == "./grafana/provisioning"
    provider = yaml.safe_load((DEPLOY / "grafana" / "provisioning" / "dashboards" / "ftis.yml").read_text())
    (prov,) = provider["providers"]
    assert g_mounts[prov["options"]["path"]] == "./grafana/dashboards"
    sources = yaml.safe_load((DEPLOY / "grafana" / "provisioning" / "datasources" / "prometheus.yml").read_text())
    (ds,) = sources["datasources"]
    assert ds["url"] == "http://prometheus:9090" and ds["type"] == "prometheus"
    uids = {p["datasource"]["uid"] for p in BOARD["panels"]} | {t["datasource"]["uid"] for p in BOARD["panels"]
                                                                for t in p["targets"]}
    assert uids == {ds["uid"]}
    for svc in ("prometheus", "grafana"):  # localhost only
        assert all(p.startswith("127.0.0.1:") for p in services[svc]["ports"])
    assert {r["gridPos"]["y"] for r in BOARD["panels"]} and len({p["id"] for p in BOARD["panels"]}) == len(BOARD["panels"])
