#!/usr/bin/env bash
# Device check: train the base-109m text JEPA for a fixed budget on one GPU (bf16 autocast) and print
# throughput + fraction of bf16 peak as JSON (also written to $OUT/device_train_109m.json when $OUT is set).
#   scripts/device_train_109m.sh                 # BUDGET_S=420 by default (the script caps it at 480)
#   scripts/device_train_109m.sh --compile       # extra flags go to the script
#   scripts/device_train_109m.sh --smoke         # CPU check, a few steps with the tiny preset
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] && PY=.venv/bin/python
"$PY" -c "import torch" 2>/dev/null || { echo "torch is not importable by $PY" >&2; exit 3; }
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader || true
exec timeout 560 "$PY" scripts/device_train_109m.py --budget-s "${BUDGET_S:-420}" "$@"
