#!/usr/bin/env bash
# Runs the test suite in two stages: the fast tests, then the slow ones (real models, many
# processes). Uses the active virtual environment, or ./.venv made by deploy/setup.sh.
# Tests marked `data` read GSM8K and MATH-500 from FTIS_DATA_DIR (default: ../shared/data
# beside this checkout); they fail, never skip, when the files are missing.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "${VIRTUAL_ENV:-}" ]; then py="$VIRTUAL_ENV/bin/python"; else py="$PWD/.venv/bin/python"; fi
[ -x "$py" ] || { echo "[test] no environment: run 'bash deploy/setup.sh' first" >&2; exit 2; }
export FTIS_DATA_DIR="${FTIS_DATA_DIR:-$(cd .. && pwd)/shared/data}"
echo "[test] stage 1: fast tests"
"$py" -m pytest -m "not slow" --durations=5 "$@"
echo "[test] stage 2: slow tests"
"$py" -m pytest -m slow --durations=10 "$@"
