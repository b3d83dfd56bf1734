"""The testnet's disk figures: bytes under the nodes' run directories, at the end and at the peak."""

from __future__ import annotations

import time

from ftis_swarm.learner.checkpoint import tree_bytes
from ftis_swarm.ops.testnet import DiskWatch


def test_disk_watch_keeps_the_peak_of_files_written_then_deleted(tmp_path):
    a, b = tmp_path / "node-0", tmp_path / "node-1"
    (a / "checkpoints").mkdir(parents=True)
    (a / "checkpoints" / "w.bin").write_bytes(b"x" * 1000)
    b.mkdir()
    dirs = [a]
    watch = DiskWatch(lambda: list(dirs), every=0.01)
    watch.start()
    dirs.append(b)  # a node started after the watch: counted from then on
    (b / "tmp.bin").write_bytes(b"y" * 500)
    deadline = time.monotonic() + 10
    while watch.peak < 1500 and time.monotonic() < deadline:
        time.sleep(0.01)
    (b / "tmp.bin").unlink()  # the old checkpoint deleted after the next one is complete
    watch.close()
    assert watch.peak == 1500 and watch.last == 1000
    assert tree_bytes(tmp_path) == 1000 and tree_bytes(tmp_path / "absent") == 0
