#!/usr/bin/env bash
# Install Muster into a virtualenv (.venv, or $VENV) and start a local cluster.
#   scripts/up.sh [muster up options...]      e.g. scripts/up.sh --nodes 8 --gpus-per-node 4
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PY=${PYTHON:-/usr/bin/python3}
[ -x "$PY" ] || PY=python3
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -e '.[api]'
"$VENV/bin/python" -m compileall -q src >/dev/null || true
# the Slurm commands start Python without `site` (-S): ~2 ms less per call (muster/launchers.py)
"$VENV/bin/python" -m muster.launchers "$VENV/bin"
"$VENV/bin/muster" up "$@"
echo "Commands are in $(cd "$VENV/bin" && pwd): export PATH=\"$(cd "$VENV/bin" && pwd):\$PATH\""
