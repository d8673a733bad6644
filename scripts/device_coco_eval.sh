#!/usr/bin/env bash
# GPU check (<= 10 minutes): the real COCO path of `captioner eval coco`, Karpathy test split, with a hub
# image encoder from a local copy. Anchors (CIDEr x100, Karpathy test): the seed paper's one-rotation
# captioner 83.8; CapDec 91.8 and DeCap ~91 (both use CLIP, trained on pairs).
#
#   COCO_ROOT=/data/coco IMAGE_ENCODER_PATH=/models/dinov2-base bash scripts/device_coco_eval.sh
#
# COCO_ROOT must hold dataset_coco.json (Karpathy split) and the images (train2014/, val2014/ as in its
# "filepath"). IMAGE_ENCODER_PATH (optional) is a local Hugging Face vision model folder (DINOv2, CLIP
# vision, ...); if unset, the usual hub cache locations are searched for DINOv2 / CLIP; if none is found the
# offline EfficientNet-Lite0 is used. Results (COCO results files + metrics JSON) go to $OUT (or ./device-out).
# Exits 0 with a clear message, running nothing, when COCO or a GPU is absent.
set -uo pipefail

cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
[ -x "$PY" ] || PY=python
OUT=${OUT:-$PWD/device-out}
BUDGET_S=${BUDGET_S:-570}          # leave ~30 s of the 10 minutes for start-up and copying back
TRAIN_LIMIT=${TRAIN_LIMIT:-20000}  # Karpathy train images used for the pairs, the bank and the decoder corpus
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export CAPTIONER_HOME=${CAPTIONER_HOME:-$OUT/home}
mkdir -p "$OUT"
START=$(date +%s)

if [ -z "${COCO_ROOT:-}" ] || { [ ! -f "$COCO_ROOT/dataset_coco.json" ] && [ ! -f "$COCO_ROOT/annotations/dataset_coco.json" ]; }; then
  echo "device_coco_eval: skipped: COCO_ROOT is not set or has no dataset_coco.json (Karpathy split);"
  echo "  set COCO_ROOT=/path/to/coco holding dataset_coco.json and the train2014/ val2014/ images."
  exit 0
fi
if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  echo "device_coco_eval: skipped: torch sees no CUDA GPU on this machine."
  exit 0
fi

ENC_PATH=${IMAGE_ENCODER_PATH:-}
if [ -z "$ENC_PATH" ]; then
  for d in "${HF_HOME:-$HOME/.cache/huggingface}"/hub/models--facebook--dinov2-base/snapshots/* \
           "${HF_HOME:-$HOME/.cache/huggingface}"/hub/models--facebook--dinov2-small/snapshots/* \
           "${HF_HOME:-$HOME/.cache/huggingface}"/hub/models--openai--clip-vit-base-patch32/snapshots/* \
           /models/dinov2-base /models/clip-vit-base-patch32; do
    if [ -f "$d/config.json" ]; then ENC_PATH=$d; break; fi
  done
fi
if [ -n "$ENC_PATH" ]; then
  IMAGE_ENCODER="hf-image:$ENC_PATH"
else
  IMAGE_ENCODER="efficientnet-lite0"
  echo "device_coco_eval: no local DINOv2/CLIP copy found (set IMAGE_ENCODER_PATH); using $IMAGE_ENCODER"
fi
echo "device_coco_eval: COCO_ROOT=$COCO_ROOT image encoder=$IMAGE_ENCODER train images=$TRAIN_LIMIT out=$OUT"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null || true

left() { echo $(( BUDGET_S - ($(date +%s) - START) )); }
run() {  # run NAME ARGS...: one evaluation under what is left of the budget
  local name=$1; shift
  local t; t=$(left)
  if [ "$t" -lt 30 ]; then echo "device_coco_eval: out of time before $name"; return 1; fi
  echo "== $name ($t s left)"
  timeout "$t" "$PY" -m captioner eval coco --coco-root "$COCO_ROOT" --image-encoder "$IMAGE_ENCODER" \
    --device cuda --train-limit "$TRAIN_LIMIT" --json --out "$OUT/$name" "$@" > "$OUT/$name.json"
  local rc=$?
  if [ $rc -eq 0 ]; then
    "$PY" - "$OUT/$name.json" <<'EOF'
import json, sys
m = json.load(open(sys.argv[1]))["metrics"]
print(f"   CIDEr {m['CIDEr']:.3f} (pycocoevalcap 0-10) = {m['CIDEr_x100']:.1f} (x100, papers)  "
      f"B@4 {100 * m['BLEU-4']:.1f}  METEOR {100 * (m['METEOR'] or 0):.1f}  n={m['n_images']}")
EOF
  else
    echo "   failed (rc=$rc)"
  fi
  return $rc
}

run retrieval-paired   --captioner retrieval --rotation paired
run retrieval-pairfree --captioner retrieval --rotation pairfree
run retrieval-random   --captioner retrieval --rotation random --no-meteor
run decoder-paired     --captioner decoder   --rotation paired --decoder-preset base
echo "device_coco_eval: done in $(( $(date +%s) - START )) s; results under $OUT"
