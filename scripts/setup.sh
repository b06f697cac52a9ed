#!/usr/bin/env bash
# Install sporch with its runtime and test dependencies into the current Python (torchao, for
# model.quant, only with SPORCH_EXTRAS=...,quant: pip install 'sporch[quant]').
# torch is pinned explicitly: an open `torch` spec would pull a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
"$PY" -m pip install -q --disable-pip-version-check "torch==${SPORCH_TORCH_VERSION:-2.13.0}"
# SPORCH_EXTRAS: what else to install (scripts/test.sh adds quant: torchao, for model.quant's tests)
"$PY" -m pip install -q --disable-pip-version-check -e ".[${SPORCH_EXTRAS:-runtime,test,report,pipelines}]"
