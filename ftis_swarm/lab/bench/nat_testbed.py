"""A testbed on real NAT: Linux network namespaces, veth pairs and MASQUERADE routers.

    with NatTestbed.create() as bed:           # needs root, `ip` and `iptables`
        bed.tcp_reachable("boot", "home1")     # False: the public side cannot dial in
        argv = bed.wrap("home1", [sys.executable, ...])        # a process inside home1's namespace

The layout, every namespace named `<prefix>-<role>` with a prefix unique to the run:

    core    a bridge (no address) that is the public segment; nothing else
    boot    11.0.0.2 on the bridge: the bootstrap
    pub     11.0.0.3 on the bridge: a public node
    pub2 .. only with `extra_public` n (1 to 6): more public hosts, 11.0.0.4 .. 11.0.0.(3 + n), named
            pub2 .. pub(1 + n): more observers of the homes' addresses (libp2p trusts an observed
            address of its own only once 4 distinct IPs reported it; hole punching needs one)
    r1, r2  routers: 11.0.0.11 / .12 on the bridge, 12.0.1.1 / 12.0.2.1 on their home LAN;
            MASQUERADE out of the bridge side (r2 with --random-fully, so its mappings cannot
            be guessed, unless `random_fully` is False); r1's uplink limited to `uplink_rate` by tbf;
            a SYN to a router's own address that no mapping expects is answered with a reset (a
            bare Linux router), or with `drop_unsolicited` dropped by its firewall (a stateful
            firewall's default; only then did a TCP hole punch through two routers work:
            lab/bench/reach_punch.py)
    home1   12.0.1.2 behind r1;   home2   12.0.2.2 behind r2
    home3   only with `forward_port` (the control home): 12.0.3.2 behind r3 (11.0.0.13), a plain
            MASQUERADE router that also forwards TCP `forward_port` on its public side to
            home3 (DNAT), as a home operator who opened a port on the router would; peers
            reach it at `public_addr("home3")`, so `auto` must find it public; `close_forward`
            removes the forward while the testbed runs (a port that closes later), `open_forward`
            puts it back

Every namespace is linked only to the others (the veth pairs are created inside them, never
in the host's namespace), none has a route to the host's network, and the addresses look
public (libp2p's autorelay advertises only relays with public addresses; 10/8, 172.16/12,
192.168/16, 100.64/10 and the documentation ranges do not count) but exist only inside
these namespaces. `close` kills what runs inside them and deletes them by their recorded
names; it runs on any failure of `create`, on `__exit__`, and at interpreter exit.

A process killed outright (SIGKILL, a timeout's SIGTERM, a machine that restarts the runner)
runs none of those, so the names are recorded on disk too, each before its namespace is
made: `RECORDS/<prefix>.json` holds the owner's pid and start time and the names. `create`
first deletes, by those recorded names, every testbed whose owner is gone (`sweep_orphans`).
"""

from __future__ import annotations

import atexit
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

PUBLIC_NET = "11.0.0"
PUBLIC_HOSTS = {"boot": 2, "pub": 3}
MAX_EXTRA_PUBLIC = 6
"""pub2 .. pub7 at 11.0.0.4 .. 11.0.0.9, below the routers' 11.0.0.11."""
HOMES = {"home1": ("r1", 1), "home2": ("r2", 2)}
"""home namespace -> (its router, the x of its LAN 12.0.x.0/24 and of its router's 11.0.0.1x)."""
FORWARDED_HOME = {"home3": ("r3", 3)}
"""The control home, built only with `forward_port`: its router forwards that port to it."""


RECORDS = Path("/run/ftis-nat-testbeds")
"""Where each testbed records its owner and its namespaces' names (a tmpfs: gone at a reboot, as they are)."""


class TestbedError(RuntimeError):
    """The testbed cannot be built here (one sentence: what is missing)."""


def unavailable_reason() -> str:
    """Why namespaces cannot be built on this machine, or "" when they can."""
    if os.geteuid() != 0:
        return "the NAT testbed needs root (network namespaces and iptables), and this process is not root"
    for tool in ("ip", "iptables", "tc"):
        if shutil.which(tool) is None:
            return f"the NAT testbed needs `{tool}`, which is not installed (apt-get install -y iptables iproute2)"
    return ""


@dataclass
class NatTestbed:
    """A built testbed; `close` is idempotent."""

    prefix: str
    uplink_rate: str = "10mbit"
    forward_port: int = 0
    """TCP port r3 forwards to home3 (0: no home3, r3: the testbed costs 7 namespaces, not 9)."""
    random_fully: bool = True
    """r2's MASQUERADE picks a random port for each connection (no hole punch can guess it); False: it keeps
    the source port where it can, as r1's does."""
    extra_public: int = 0
    """Public hosts besides boot and pub (pub2 ..), one namespace each."""
    drop_unsolicited: bool = False
    """The routers drop inbound packets of no known connection instead of answering them."""
    namespaces: list[str] = field(default_factory=list)
    """The names created so far, in creation order: exactly what `close` deletes."""

    @classmethod
    def create(cls, *, uplink_rate: str = "10mbit", forward_port: int = 0, random_fully: bool = True,
               extra_public: int = 0, drop_unsolicited: bool = False) -> "NatTestbed":
        """Builds the layout above (home3 only with `forward_port`, pub2 .. with `extra_public`); raises
        TestbedError (why) when it cannot, leaving nothing behind."""
        reason = unavailable_reason()
        if reason:
            raise TestbedError(reason)
        if not 0 <= forward_port < 65536:
            raise ValueError("forward_port must be a TCP port (0: no forwarded home)")
        if not 0 <= extra_public <= MAX_EXTRA_PUBLIC:
            raise ValueError(f"extra_public must be 0 to {MAX_EXTRA_PUBLIC}")
        sweep_orphans()
        bed = cls(prefix=f"ftr{secrets.token_hex(3)}", uplink_rate=uplink_rate, forward_port=forward_port,
                  random_fully=random_fully, extra_public=extra_public, drop_unsolicited=drop_unsolicited)
        atexit.register(bed.close)
        try:
            bed._build()
        except BaseException:
            bed.close()
            raise
        return bed

    def ns(self, role: str) -> str:
        return f"{self.prefix}-{role}"

    @property
    def homes(self) -> dict[str, tuple[str, int]]:
        """The homes built: home1 and home2, and home3 with `forward_port` (as `HOMES`)."""
        return {**HOMES, **(FORWARDED_HOME if self.forward_port else {})}

    @property
    def public_hosts(self) -> dict[str, int]:
        """The public hosts built: role -> the x of its 11.0.0.x (boot, pub, and pub2 .. with `extra_public`)."""
        return {**PUBLIC_HOSTS, **{f"pub{i + 2}": 4 + i for i in range(self.extra_public)}}

    def addr(self, role: str) -> str:
        """The address `role` listens on (a home's own LAN address: nobody outside can reach it)."""
        if role in self.public_hosts:
            return f"{PUBLIC_NET}.{self.public_hosts[role]}"
        if role in self.homes:
            return f"12.0.{self.homes[role][1]}.2"
        raise KeyError(f"no host {role!r} in the testbed")

    def router_addr(self, home: str) -> str:
        """The public address of `home`'s router: the one every connection `home` opens comes from."""
        return f"{PUBLIC_NET}.{10 + self.homes[home][1]}"

    def public_addr(self, role: str) -> str:
        """The address peers dial to reach `role`: its router's public one for the forwarded home, else `addr`."""
        if role in FORWARDED_HOME and self.forward_port:
            return self.router_addr(role)
        return self.addr(role)

    def wrap(self, role: str, argv: list[str]) -> list[str]:
        """`argv` to run inside `role`'s namespace."""
        return ["ip", "netns", "exec", self.ns(role), *argv]

    def run(self, role: str, argv: list[str], *, check: bool = True,
            timeout: float = 20.0) -> subprocess.CompletedProcess:
        return _sh(self.wrap(role, argv), check=check, timeout=timeout)

    def tcp_reachable(self, src: str, dst: str, *, port: int = 7411, timeout: float = 2.0) -> bool:
        """Whether a TCP connection from `src` to `dst`'s `public_addr` reaches a listener on `dst`'s address."""
        server = subprocess.Popen(self.wrap(dst, [sys.executable, "-c", _LISTEN, self.addr(dst), str(port)]),
                                  stdout=subprocess.PIPE, text=True)
        try:
            assert server.stdout is not None and server.stdout.readline().strip() == "ready", "listener failed"
            started = time.monotonic()
            done = self.run(src, [sys.executable, "-c", _CONNECT, self.public_addr(dst), str(port), str(timeout)],
                            check=False, timeout=timeout + 10.0)
            return done.returncode == 0 and time.monotonic() - started < timeout + 10.0
        finally:
            server.kill()
            server.wait()

    def _add_ns(self, role: str) -> str:
        name = self.ns(role)
        self.namespaces.append(name)
        self._record()  # the name on disk before the namespace exists: a kill at any point leaves it findable
        _sh(["ip", "netns", "add", name])
        self.run(role, ["ip", "link", "set", "lo", "up"])
        return name

    def _veth(self, a_role: str, a_dev: str, b_role: str, b_dev: str) -> None:
        _sh(["ip", "link", "add", "name", a_dev, "netns", self.ns(a_role), "type", "veth",
             "peer", "name", b_dev, "netns", self.ns(b_role)])
        self.run(a_role, ["ip", "link", "set", a_dev, "up"])
        self.run(b_role, ["ip", "link", "set", b_dev, "up"])

    def _on_bridge(self, role: str, host: int, index: int) -> None:
        self._veth("core", f"p{index}", role, "wan")
        self.run("core", ["ip", "link", "set", f"p{index}", "master", "br0"])
        self.run(role, ["ip", "addr", "add", f"{PUBLIC_NET}.{host}/24", "dev", "wan"])

    def _build(self) -> None:
        self._add_ns("core")
        self.run("core", ["ip", "link", "add", "br0", "type", "bridge"])
        self.run("core", ["ip", "link", "set", "br0", "up"])
        index = 0
        for role, host in self.public_hosts.items():
            self._add_ns(role)
            self._on_bridge(role, host, index)
            index += 1
        for home, (router, x) in self.homes.items():
            self._add_ns(router)
            self._add_ns(home)
            self._on_bridge(router, 10 + x, index)
            index += 1
            self._veth(router, "lan", home, "eth0")
            self.run(router, ["ip", "addr", "add", f"12.0.{x}.1/24", "dev", "lan"])
            self.run(home, ["ip", "addr", "add", f"12.0.{x}.2/24", "dev", "eth0"])
            self.run(home, ["ip", "route", "add", "default", "via", f"12.0.{x}.1"])
            self.run(router, ["sysctl", "-qw", "net.ipv4.ip_forward=1"])
            masquerade = ["iptables", "-t", "nat", "-A", "POSTROUTING", "-s", f"12.0.{x}.0/24", "-o", "wan",
                          "-j", "MASQUERADE"]
            self.run(router, masquerade + (["--random-fully"] if x == 2 and self.random_fully else []))
            if self.drop_unsolicited:
                self.run(router, ["iptables", "-A", "INPUT", "-i", "wan", "-m", "conntrack", "--ctstate",
                                  "NEW,INVALID", "-j", "DROP"])
            if x == 1 and self.uplink_rate:
                self.run(router, ["tc", "qdisc", "add", "dev", "wan", "root", "tbf", "rate", self.uplink_rate,
                                  "burst", "64kb", "latency", "100ms"])
            if home in FORWARDED_HOME:
                self.run(router, self._forward_rule("-A", home))

    def _forward_rule(self, action: str, home: str) -> list[str]:
        x = FORWARDED_HOME[home][1]
        return ["iptables", "-t", "nat", action, "PREROUTING", "-i", "wan", "-p", "tcp", "--dport",
                str(self.forward_port), "-j", "DNAT", "--to-destination", f"12.0.{x}.2:{self.forward_port}"]

    def _change_forward(self, action: str, home: str) -> None:
        if home not in FORWARDED_HOME or not self.forward_port:
            raise KeyError(f"{home!r} has no port forward in this testbed")
        self.run(FORWARDED_HOME[home][0], self._forward_rule(action, home))

    def close_forward(self, home: str = "home3") -> None:
        """Removes `home`'s port forward live (its router's DNAT rule), as an operator or a router's reboot
        would: new connections to its public port now end at the router; open ones go on (conntrack)."""
        self._change_forward("-D", home)

    def open_forward(self, home: str = "home3") -> None:
        """Puts back the port forward `close_forward` removed (a port that opens later)."""
        self._change_forward("-A", home)

    def count_direct(self, home: str, other: str) -> None:
        """From now on counts the bytes `home`'s router forwards to or from `other`'s router: traffic on a
        direct path between the two homes, which never crosses a relay (`direct_bytes`)."""
        for side in ("-s", "-d"):  # rules without a target only count
            self.run(self.homes[home][0], ["iptables", "-A", "FORWARD", side, self.router_addr(other)])

    def direct_bytes(self, home: str) -> int:
        """The bytes `count_direct`'s rules on `home`'s router have counted so far."""
        out = self.run(self.homes[home][0], ["iptables", "-nvx", "-L", "FORWARD"]).stdout.splitlines()
        return sum(int(line.split()[1]) for line in out[2:] if line.split() and line.split()[0].isdigit())

    def _record(self) -> None:
        RECORDS.mkdir(parents=True, exist_ok=True)
        path = RECORDS / f"{self.prefix}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"pid": os.getpid(), "start": _start_time(os.getpid()),
                                   "namespaces": self.namespaces}))
        os.replace(tmp, path)

    def close(self) -> None:
        """Kills every process inside the namespaces, then deletes them and their record (idempotent, never
        raises)."""
        _delete(self.namespaces)
        (RECORDS / f"{self.prefix}.json").unlink(missing_ok=True)
        atexit.unregister(self.close)

    def __enter__(self) -> "NatTestbed":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


_LISTEN = ("import socket, sys; s = socket.create_server((sys.argv[1], int(sys.argv[2]))); print('ready', flush=True);"
           " c, _ = s.accept(); c.sendall(b'hi')")
_CONNECT = ("import socket, sys; c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3]));"
            " assert c.recv(2) == b'hi'")


def sweep_orphans() -> list[str]:
    """Deletes, by their recorded names, the namespaces of every recorded testbed whose owning process is gone
    (module docstring); returns those names."""
    swept: list[str] = []
    for path in sorted(RECORDS.glob("ftr*.json")) if RECORDS.is_dir() else []:
        try:
            record = json.loads(path.read_text())
            pid, start, names = int(record["pid"]), record.get("start"), [str(n) for n in record["namespaces"]]
        except (OSError, ValueError, KeyError, TypeError):
            continue  # being written (never: it is replaced whole) or not ours
        if _start_time(pid) is not None and _start_time(pid) == start:
            continue  # its owner still runs
        swept += names
        _delete(list(names))
        path.unlink(missing_ok=True)
    return swept


def _delete(names: list[str]) -> None:
    """Kills every process inside the namespaces `names` (emptied, newest first), then deletes each."""
    while names:
        name = names.pop()
        pids = _sh(["ip", "netns", "pids", name], check=False).stdout.split()
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass  # gone already
        _sh(["ip", "netns", "del", name], check=False)


def _start_time(pid: int) -> Optional[int]:
    """The process's start time in clock ticks since boot (/proc/<pid>/stat), None when it is gone: with the pid,
    it tells a live owner from a new process that reuses its pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


def _sh(argv: list[str], *, check: bool = True, timeout: Optional[float] = 20.0) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise TestbedError(f"`{' '.join(argv)}` failed ({done.returncode}): {done.stderr.strip()}")
    return done
