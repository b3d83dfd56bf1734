"""The NAT testbed itself: NAT that really blocks inbound, no link to the host, nothing left behind."""

from __future__ import annotations

import subprocess
import sys

import pytest
from nat_support import nat_testbed

from ftis_swarm.lab.bench.nat_testbed import NatTestbed

pytestmark = pytest.mark.net


def _host_namespaces() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def _host_links() -> set[str]:
    out = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    return {line.split(":")[1].strip() for line in out.splitlines()}


def test_homes_dial_out_but_nobody_dials_in_and_everything_is_deleted() -> None:
    links_before = _host_links()
    bed = nat_testbed()
    names = list(bed.namespaces)
    try:
        assert len(names) == 7 and all(n.startswith(bed.prefix + "-") for n in names)
        assert set(names) <= _host_namespaces()
        assert _host_links() == links_before  # every veth lives inside the testbed's namespaces
        assert bed.tcp_reachable("home1", "boot") and bed.tcp_reachable("home2", "pub")
        assert bed.tcp_reachable("boot", "pub")
        for src, dst in [("boot", "home1"), ("pub", "home2"), ("home1", "home2"), ("home2", "home1")]:
            assert not bed.tcp_reachable(src, dst), f"{src} reached {dst} through NAT"
        for role in ("boot", "pub", "r1", "r2"):
            routes = bed.run(role, ["ip", "route"]).stdout
            assert "default" not in routes, f"{role} has a route out of the testbed: {routes}"
        masq = bed.run("r2", ["iptables", "-t", "nat", "-S", "POSTROUTING"]).stdout
        assert "MASQUERADE" in masq and "--random-fully" in masq
        assert "tbf" in bed.run("r1", ["tc", "qdisc", "show", "dev", "wan"]).stdout
        assert _knock(bed, "boot", bed.router_addr("home1")) == "refused"  # a bare Linux router resets
    finally:
        bed.close()
    assert not set(names) & _host_namespaces()
    bed.close()  # idempotent


def _knock(bed: NatTestbed, src: str, addr: str, port: int = 7411) -> str:
    """What a SYN from `src` to `addr`:`port` (nothing listens there) gets: "refused" (a reset) or "timeout"."""
    code = ("import socket, sys\ntry:\n    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=1.0)\n"
            "except ConnectionRefusedError:\n    print('refused')\nexcept OSError:\n    print('timeout')\n"
            "else:\n    print('open')")
    return bed.run(src, [sys.executable, "-c", code, addr, str(port)]).stdout.strip()


def test_the_hole_punching_variant_keeps_ports_drops_unsolicited_syns_and_adds_public_hosts() -> None:
    with nat_testbed(random_fully=False, extra_public=2, drop_unsolicited=True) as bed:
        assert len(bed.namespaces) == 9 and bed.addr("pub2") == "11.0.0.4" and bed.addr("pub3") == "11.0.0.5"
        assert bed.tcp_reachable("home1", "pub3") and bed.tcp_reachable("pub2", "boot")
        assert not bed.tcp_reachable("pub2", "home2")
        masq = bed.run("r2", ["iptables", "-t", "nat", "-S", "POSTROUTING"]).stdout
        assert "MASQUERADE" in masq and "--random-fully" not in masq
        for home in ("home1", "home2"):
            assert _knock(bed, "pub", bed.router_addr(home)) == "timeout"  # dropped, not reset
    with pytest.raises(ValueError, match="extra_public"):
        NatTestbed.create(extra_public=7)


def test_the_control_home_is_reached_on_its_forwarded_port_only() -> None:
    with nat_testbed(forward_port=7411) as bed:
        assert len(bed.namespaces) == 9 and bed.public_addr("home3") == "11.0.0.13"
        assert bed.tcp_reachable("boot", "home3", port=7411) and bed.tcp_reachable("home1", "home3", port=7411)
        assert not bed.tcp_reachable("boot", "home3", port=7412)  # only the forwarded port
        assert bed.tcp_reachable("home3", "pub") and not bed.tcp_reachable("home3", "home2")
        assert "DNAT" in bed.run("r3", ["iptables", "-t", "nat", "-S", "PREROUTING"]).stdout
        bed.close_forward("home3")  # the port closes later: nobody outside reaches home3 any more
        assert "DNAT" not in bed.run("r3", ["iptables", "-t", "nat", "-S", "PREROUTING"]).stdout
        assert not bed.tcp_reachable("boot", "home3", port=7411) and bed.tcp_reachable("home3", "pub")
        with pytest.raises(KeyError, match="no port forward"):
            bed.close_forward("home1")
        bed.open_forward("home3")  # and opens again
        assert bed.tcp_reachable("boot", "home3", port=7411)


def test_a_failure_inside_the_testbed_still_deletes_it() -> None:
    names: list[str] = []
    with pytest.raises(ZeroDivisionError):
        with nat_testbed() as bed:
            names = list(bed.namespaces)
            1 / 0
    assert names and not set(names) & _host_namespaces()


def test_a_failed_build_leaves_no_namespace(monkeypatch: pytest.MonkeyPatch) -> None:
    nat_testbed().close()  # skips or fails here, with the reason, where namespaces cannot be built
    created: list[str] = []
    real_add = NatTestbed._add_ns

    def add_then_fail(self: NatTestbed, role: str) -> str:
        name = real_add(self, role)
        created.append(name)
        if role == "r1":
            raise RuntimeError("router failed")
        return name

    monkeypatch.setattr(NatTestbed, "_add_ns", add_then_fail)
    with pytest.raises(RuntimeError, match="router failed"):
        NatTestbed.create()
    assert len(created) == 4 and not set(created) & _host_namespaces()


def test_a_testbed_whose_process_was_killed_is_deleted_by_its_recorded_names_and_a_live_one_is_kept() -> None:
    from ftis_swarm.lab.bench.nat_testbed import sweep_orphans

    live = nat_testbed()
    kept = list(live.namespaces)
    code = ("import sys, time\nfrom ftis_swarm.lab.bench.nat_testbed import NatTestbed\n"
            "bed = NatTestbed.create()\nprint(' '.join(bed.namespaces), flush=True)\ntime.sleep(600)")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        names = child.stdout.readline().split()
        assert len(names) == 7 and set(names) <= _host_namespaces()
        child.kill()  # SIGKILL: no close, no atexit
        child.wait()
        assert set(names) <= _host_namespaces()  # left behind by the killed process ...
        swept = sweep_orphans()
        assert set(swept) == set(names)  # ... and deleted by the names it recorded
        assert not set(names) & _host_namespaces()
        assert set(kept) <= _host_namespaces()  # its owner runs: kept
    finally:
        child.kill()
        child.wait()
        sweep_orphans()  # the child's, also when an assertion above failed
        live.close()
    assert not set(kept) & _host_namespaces() and sweep_orphans() == []
