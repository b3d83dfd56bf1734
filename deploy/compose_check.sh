#!/usr/bin/env bash
# The compose testnet, built and run for real, then checked and taken down (deploy/compose_check.py):
# an engine (Debian's docker.io when none), the images (from Debian packages where the image hub is
# unreachable), `up`, every started service healthy, rounds advancing on peers' groups, Prometheus
# scraping every started node, every dashboard query returning series, `down` + `up` resuming each
# node from its checkpoint; `down -v` always, nothing of its own left behind. 25-40 minutes on 2
# cores, so it is not in deploy/test.sh (CI); run it by hand or as `pytest -m docker tests/deploy`.
#   bash deploy/compose_check.sh [--minutes N] [--checkpoint-every K] [--timeout S]
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "${VIRTUAL_ENV:-}" ]; then py="$VIRTUAL_ENV/bin/python"; else py="$PWD/.venv/bin/python"; fi
[ -x "$py" ] || py=python3
exec "$py" deploy/compose_check.py "$@"
