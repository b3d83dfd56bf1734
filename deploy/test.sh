#!/usr/bin/env bash
# Runs the test suite in two stages: the fast tests, then the slow ones (real models, many
# processes). Uses the active virtual environment, or ./.venv made by deploy/setup.sh.
# Tests marked `data` read the GSM8K and MATH-500 files shipped in the package
# (ftis_swarm/tasks/data), or the folder FTIS_DATA_DIR names; they fail, never skip, when
# a file is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "${VIRTUAL_ENV:-}" ]; then py="$VIRTUAL_ENV/bin/python"; else py="$PWD/.venv/bin/python"; fi
[ -x "$py" ] || { echo "[test] no environment: run 'bash deploy/setup.sh' first" >&2; exit 2; }
echo "[test] stage 1: fast tests"
"$py" -m pytest -m "not slow" --durations=5 "$@"
echo "[test] stage 2: slow tests"
# `docker`: the compose testnet built and run for real (25-40 min, more than CI's budget allows):
# bash deploy/compose_check.sh, or pytest -m docker tests/deploy (docs/deploy.md).
"$py" -m pytest -m "slow and not docker" --durations=10 "$@"
