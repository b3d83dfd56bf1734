"""`ftis-node status`: a node's status document, from its run directory or its status page.

A run directory holds `status.json`, which the node rewrites every round
(node/status.py), whether or not it serves a page; a URL is the page's address
(`http://127.0.0.1:PORT/`, as `<run_dir>/status.url` names it), whose `status.json` is
read. Either way the same document; any failure to read it is one `UserError` sentence.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from ftis_swarm.errors import UserError
from ftis_swarm.node.status import STATUS_FILE

TIMEOUT_SECONDS = 5.0


class StatusReadError(UserError):
    """No status document where the user pointed."""


def read_status(target: str) -> dict[str, Any]:
    """The status document of the node at `target` (a run directory, or an http(s) URL of its page)."""
    if target.startswith(("http://", "https://")):
        url = target.rstrip("/") + "/" + STATUS_FILE if not target.endswith(".json") else target
        try:
            with urllib.request.urlopen(url, timeout=TIMEOUT_SECONDS) as res:
                body = res.read()
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise StatusReadError(f"cannot read {url}: {reason}") from None
        where = url
    else:
        path = Path(target).expanduser()
        path = path / STATUS_FILE if path.is_dir() else path
        try:
            body = path.read_bytes()
        except OSError as exc:
            raise StatusReadError(f"cannot read {path} ({exc.strerror or exc}): give a node's run directory, or "
                                  "the URL of its status page") from None
        where = str(path)
    try:
        doc = json.loads(body)
    except ValueError as exc:
        raise StatusReadError(f"{where} is not a status document: {exc}") from None
    if not isinstance(doc, dict) or not {"node", "rounds", "peers", "disk"} <= doc.keys():
        raise StatusReadError(f"{where} is not a status document (it lacks node, rounds, peers or disk)")
    return doc
