"""What a process holds, read from /proc (Linux): resident memory, its peak, open files, its children.

The multi-process benches (`bench hostile`, `bench soak`) watch every process of a testnet
with these: a node, and the p2pd daemon it started (a child of one of its threads).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)


def children(pid: int) -> list[int]:
    """Child processes of any of `pid`'s threads (p2pd is started from the event loop's thread)."""
    out = []
    for task in sorted(Path(f"/proc/{pid}/task").glob("*")):
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue  # the thread ended while it was listed
    return sorted(out)


def with_children(roles: dict[str, int]) -> dict[str, int]:
    """{name: pid} for every role's process and its children, named `<role>/p2pd`, `<role>/p2pd1`, ..."""
    out = {}
    for role, pid in roles.items():
        out[role] = pid
        for i, child in enumerate(children(pid)):
            out[f"{role}/p2pd{i if i else ''}"] = child
    return out


def status_mb(pid: int, field: str) -> float:
    """A memory field of /proc/<pid>/status (`VmRSS`, `VmHWM`) in MB; 0 for a process that has ended."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass  # the process ended: it has no memory to report
    return 0.0


def open_fds(pid: int) -> int:
    """File descriptors the process holds open (files, sockets, pipes); 0 for a process that has ended."""
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def reset_peaks(pids: dict[str, int]) -> None:
    """Sets each process's peak resident memory (`VmHWM`) back to its current one."""
    for pid in pids.values():
        try:
            Path(f"/proc/{pid}/clear_refs").write_text("5")
        except OSError:
            log.debug("cannot reset the peak memory of %d", pid)

