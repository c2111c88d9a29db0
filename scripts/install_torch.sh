#!/usr/bin/env bash
# Installs PyTorch into the given Python environment before the rest of forge-ml,
# so that pip never resolves `torch` to a multi-GB CUDA build on a machine without a GPU.
#   scripts/install_torch.sh .venv/bin/python
# Order on a machine without a GPU: an already installed torch; a CPU wheel from pip's
# configured find-links; PyTorch's CPU wheel index. With a GPU: the default (CUDA) build.
# FORGE_TORCH_SPEC overrides everything (e.g. FORGE_TORCH_SPEC="torch==2.5.1").
set -euo pipefail
PY="${1:-python3}"
PIP=("$PY" -m pip install --quiet)

if [[ -n "${FORGE_TORCH_SPEC:-}" ]]; then
  exec "${PIP[@]}" "$FORGE_TORCH_SPEC"
fi
if "$PY" -c "import torch" 2>/dev/null; then
  exit 0
fi
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  echo "install_torch: GPU found, installing the CUDA build of torch"
  exec "${PIP[@]}" torch
fi
echo "install_torch: no GPU, installing a CPU build of torch"
if "${PIP[@]}" --no-index --no-deps torch 2>/dev/null; then
  version="$("$PY" -c 'import importlib.metadata as m; print(m.version("torch"))')"
  if [[ "$version" == *"+cpu"* ]]; then
    exec "${PIP[@]}" "torch==$version"   # pulls torch's own dependencies from the index
  fi
  "$PY" -m pip uninstall --quiet --yes torch   # a local wheel that is not a CPU build
fi
exec "${PIP[@]}" --index-url https://download.pytorch.org/whl/cpu --extra-index-url https://pypi.org/simple torch
