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
    # the nodes a plain `up` starts are listed (one that crashed shows as down); a node under a profile
    # is found by its name on the compose network only while it runs (nothing down when never started)
    targets = {t for sc in job["static_configs"] for t in sc["targets"]}
    looked_up = {n for sd in job["dns_sd_configs"] for n in sd["names"]}
    assert all(sd["port"] == 9100 and sd["type"] == "A" for sd in job["dns_sd_configs"])
    nodes = {n for n, svc in services.items() if svc.get("command", [None])[0] == "join"}
    in_profile = {n for n in nodes if services[n].get("profiles")}
    assert targets == {f"{n}:9100" for n in nodes - in_profile} and looked_up == in_profile == {"node-gpu"}
    (relabel,) = job["relabel_configs"]  # a looked-up node's instance is its name too, as the panels show it
    assert relabel["source_labels"] == ["__meta_dns_name"] and relabel["target_label"] == "instance"
    assert re.sub(relabel["regex"], relabel["replacement"].replace("$1", r"\1"), "node-gpu") == "node-gpu:9100"
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


# What Grafana 12.1.0 (the compose file's pin) loads, read from its sources, since Grafana cannot run here:
# - schemaVersion: the dashboard migrator upgrades versions from MIN_VERSION 9
#   (apps/dashboard/pkg/migration/schemaversion/migrations.go) to 41, the DASHBOARD_SCHEMA_VERSION of
#   Grafana 12.0-12.2 (public/app/features/dashboard/state/DashboardMigrator.ts; 42 came later). A board
#   above the running Grafana's version is shown unmigrated, below 9 is refused.
# - panel types: the core panel plugins of Grafana 12 (public/app/plugins/panel/*/plugin.json); the
#   Angular ones 12 removed (graph, singlestat, table-old) are auto-migrated or fail, so none is allowed.
GRAFANA_PIN = "grafana/grafana:12.1.0"
SCHEMA_VERSIONS = range(9, 41 + 1)
CORE_PANELS = {"alertlist", "annolist", "barchart", "bargauge", "candlestick", "canvas", "dashlist", "datagrid",
               "debug", "flamegraph", "gauge", "geomap", "heatmap", "histogram", "logs", "news", "nodeGraph",
               "piechart", "stat", "state-timeline", "status-history", "table", "text", "timeseries", "traces",
               "trend", "xychart"}


def test_the_dashboard_is_one_the_pinned_grafana_loads():
    assert COMPOSE["services"]["grafana"]["image"] == GRAFANA_PIN  # the facts above are this version's
    assert BOARD["schemaVersion"] in SCHEMA_VERSIONS
    assert {p["type"] for p in BOARD["panels"]} <= CORE_PANELS
    sources = yaml.safe_load((DEPLOY / "grafana" / "provisioning" / "datasources" / "prometheus.yml").read_text())
    (ds,) = sources["datasources"]
    for panel in BOARD["panels"]:  # each panel and query names the provisioned source by uid and type
        for ref in [panel["datasource"], *(t["datasource"] for t in panel["targets"])]:
            assert ref == {"type": ds["type"], "uid": ds["uid"]}, panel["title"]
        assert {"x", "y", "w", "h"} <= set(panel["gridPos"]) and panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        assert all(t.get("refId") for t in panel["targets"]), panel["title"]
    assert BOARD["uid"] and len(BOARD["uid"]) <= 40  # Grafana refuses longer uids


def test_each_panel_shows_something_no_other_panel_shows():
    """The duplicate "Own reward and accuracy" series (one number for a binary reward) stays gone."""
    seen: dict[str, str] = {}
    for panel in BOARD["panels"]:
        exprs = [" ".join(t["expr"].split()) for t in panel["targets"]]
        assert len(set(exprs)) == len(exprs), panel["title"]
        for e in exprs:
            assert e not in seen, f"{e!r} in both {seen[e]!r} and {panel['title']!r}"
            seen[e] = panel["title"]
    assert len({p["title"] for p in BOARD["panels"]}) == len(BOARD["panels"])
