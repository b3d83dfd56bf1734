"""`StatusServer`: the status page of a node, `/` (HTML) and `/status.json`, on a port of its own.

Off unless `status_port` is given (0 picks a free port; the testnet turns it on for every
node); bound to `status_host`, 127.0.0.1 unless told otherwise. The page is one static file
with a script that fetches `status.json` every `REFRESH_SECONDS` and redraws, so it shows
a running node's rounds as they come without a reload. The server answers GET only, from
a thread of its own, from the document the board last wrote (a reference handed over whole:
a request never waits on a round, nor sees half of one). The bound address is written to
`<run_dir>/status.url` for the testnet and `ftis-node status` to find.
"""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.resources import files
from pathlib import Path
from typing import Any, Callable

from ftis_swarm.errors import UserError

log = logging.getLogger(__name__)

REFRESH_SECONDS = 2
URL_FILE = "status.url"


class StatusPageError(UserError):
    """The status port cannot be bound."""


def page_html() -> bytes:
    return files("ftis_swarm.node").joinpath("status_page.html").read_bytes().replace(
        b"__REFRESH_MS__", str(REFRESH_SECONDS * 1000).encode())


class StatusServer:
    """Serves `document()` (a JSON-able dict) as /status.json, and the page at /."""

    def __init__(self, document: Callable[[], dict[str, Any]], *, port: int, host: str = "127.0.0.1") -> None:
        self._document = document
        page = page_html()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (the http.server name)
                path = self.path.split("?", 1)[0]
                if path in ("/", "/index.html"):
                    self._send(200, "text/html; charset=utf-8", page)
                elif path == "/status.json":
                    self._send(200, "application/json", json.dumps(document()).encode())
                else:
                    self._send(404, "text/plain; charset=utf-8", b"not found: / and /status.json are served\n")

            def _send(self, code: int, kind: str, body: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, fmt: str, *args: Any) -> None:
                log.debug("status page: " + fmt, *args)

        try:
            self._server = ThreadingHTTPServer((host, port), Handler)
        except OSError as exc:
            raise StatusPageError(f"cannot serve the status page on {host}:{port} ({exc.strerror or exc}); give "
                                  "another --status-port, or 0 for any free one") from None
        self._server.daemon_threads = True
        shown = f"[{host}]" if ":" in host else host
        self.url = f"http://{shown}:{self._server.server_port}/"
        self._thread = threading.Thread(target=self._server.serve_forever, name="status-page", daemon=True)
        self._thread.start()

    def write_url(self, run_dir: Path) -> None:
        tmp = Path(run_dir) / (URL_FILE + ".tmp")
        tmp.write_text(self.url + "\n")
        tmp.replace(Path(run_dir) / URL_FILE)  # whole or absent for a reader

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
