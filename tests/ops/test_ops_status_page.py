"""The status page in a real browser (Debian's chromium, driven by selenium) on a tiny testnet.

It loads, shows the node and its peers, and updates as rounds finish, without a reload; it
draws the held-out curve (an SVG point per evaluation of the node's status.json, a line
through them; the nodes evaluate every `EVAL_EVERY` rounds here). `ftis-node status` on the
page's URL and on the run directory prints the same round. With
`STATUS_PAGE_SCREENSHOT=<file.png>` (not `FTIS_*`: those are config keys) the page is also saved as a
screenshot once the curve has three points (the closing note's).
chromium and chromedriver come from apt (`.ci/run` installs them when missing); without them
the test fails with that sentence, it does not skip.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.net]

NODES, ROUNDS = 2, 12
EVAL_EVERY = 2


def _browser():
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and driver):
        pytest.fail("the status page test needs Debian's chromium and chromium-driver: apt-get install -y chromium "
                    "chromium-driver (.ci/run does it when they are missing)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1200,1400"):
        opts.add_argument(arg)
    return webdriver.Chrome(service=Service(driver), options=opts)


def _wait(what: str, fn, timeout: float, proc=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the testnet exited with status {proc.returncode} before {what}")
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def _rounds_shown(browser) -> list[int]:
    # read in one script, atomically: the page replaces its rows every second, which makes elements
    # found one call earlier stale
    cells = browser.execute_script(
        "return Array.from(document.querySelectorAll('#rounds tr')).slice(1)"
        ".map(row => row.querySelector('td')).filter(td => td !== null).map(td => td.textContent.trim());")
    return [int(text) for text in cells]


def _curve_shown(browser) -> tuple[list[tuple[str, int, float]], int]:
    """The held-out curve as drawn, read in one script: its points (task, round, accuracy) and how many
    vertices its line has."""
    points, vertices = browser.execute_script(
        "const line = document.querySelector('#curve polyline.line');"
        "return [Array.from(document.querySelectorAll('#curve circle.point'))"
        ".map(c => [c.dataset.task, Number(c.dataset.round), Number(c.dataset.acc)]),"
        " line ? line.getAttribute('points').trim().split(/\\s+/).length : 0];")
    return [tuple(p) for p in points], vertices


def test_status_page_loads_shows_the_nodes_and_updates(tmp_path):
    from selenium.webdriver.common.by import By

    workdir = tmp_path / "testnet"
    out_file = open(tmp_path / "testnet.out", "w")
    proc = subprocess.Popen([sys.executable, "-m", "ftis_swarm.cli", "testnet", "--preset", "tiny", "--nodes", str(NODES),
                             "--rounds", str(ROUNDS), "--run-dir", str(workdir), "--no-table",
                             "--set", f"eval_every={EVAL_EVERY}"],
                            stdout=out_file, stderr=subprocess.STDOUT)
    browser = None
    try:
        urls = _wait("every node's status page", lambda: len(list(workdir.glob("node-*/status.url"))) == NODES and
                     sorted(workdir.glob("node-*/status.url")), 600, proc)
        dirs = [u.parent for u in urls]
        url = (dirs[0] / "status.url").read_text().strip()
        assert url.startswith("http://127.0.0.1:")
        other = json.loads((dirs[1] / "status.json").read_text())["node"]["peer_id"]

        browser = _browser()
        browser.get(url)
        first = _wait("a finished round on the page", lambda: _rounds_shown(browser), 300)
        node = browser.find_element(By.ID, "node").text
        assert "tiny-a" in node and "arith" in node and "testnet-" in node  # the node: model, task, run id
        peers = _wait("the other node among the peers",
                      lambda: other[-8:] in browser.find_element(By.ID, "peers").text and
                      browser.find_element(By.ID, "peers").text, 300)
        assert "score" in peers and "refused" in peers and "tenure" in peers
        # the first checkpoint comes after round `checkpoint_every` (5), which the page may not have reached yet
        disk = _wait("a checkpoint in the disk table", lambda: "ckpt-" in browser.find_element(By.ID, "disk").text and
                     browser.find_element(By.ID, "disk").text, 300, proc)
        assert re.search(r"ckpt-\S* \(round \d+\)", disk), disk
        reach = browser.find_element(By.ID, "reachability").text  # on loopback the bootstrap dials each node back
        assert "public" in reach and "dial-back" in reach and "yes" in reach and "peers dialed port" in reach
        # updates without a reload: a later round appears on the same page
        later = _wait("a later round on the page", lambda: max(_rounds_shown(browser)) > max(first) and
                      _rounds_shown(browser), 300)
        assert later == sorted(later, reverse=True)  # newest first
        # the held-out curve: a point per evaluation the node has made (round 0 first), a line through them
        drawn, vertices = _wait("three held-out points on the curve", lambda: len(_curve_shown(browser)[0]) >= 3
                                and _curve_shown(browser), 300, proc)
        curve = {p["round"]: p["heldout_acc"] for p in
                 json.loads((dirs[0] / "status.json").read_text())["heldout"]["curve"]}
        assert [r for _, r, _ in drawn] == sorted(r for _, r, _ in drawn) and drawn[0][1] == 0
        assert all(task == "arith" and r % EVAL_EVERY == 0 and acc == curve[r] for task, r, acc in drawn), (drawn, curve)
        assert vertices == len(drawn)  # one line through the points
        assert "held-out test items of arith" in browser.find_element(By.ID, "heldout-note").text
        shot = os.environ.get("STATUS_PAGE_SCREENSHOT")
        if shot:
            Path(shot).parent.mkdir(parents=True, exist_ok=True)
            browser.save_screenshot(shot)

        shown = json.loads((dirs[0] / "status.json").read_text())["node"]["round"]
        for target in (url, str(dirs[0])):
            out = subprocess.run([sys.executable, "-m", "ftis_swarm.cli", "status", target], capture_output=True,
                                 text=True, timeout=120, env=dict(os.environ, COLUMNS="200"))
            assert out.returncode == 0, out.stderr
            assert other[-8:] in out.stdout and f"of {ROUNDS}" in out.stdout
            assert int(re.search(r"round\s+(\d+)\s+of", out.stdout).group(1)) >= shown, out.stdout[:400]
        assert proc.wait(timeout=900) == 0
    finally:
        if browser is not None:
            browser.quit()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out_file.close()
    log = (tmp_path / "testnet.out").read_text()
    assert "status page http://127.0.0.1:" in log
    assert "disk" in log and "at its peak" in log
    assert json.loads((dirs[0] / "status.json").read_text())["node"]["state"] == "finished"
