#!/bin/sh
# Install what the dashboard browser test (tests/e2e/test_dashboard.py) needs: Debian's
# headless-capable Chromium and Playwright's Python package (driven with
# executable_path=/usr/bin/chromium). Never `playwright install`: it downloads its own browser
# build, which cannot be fetched here. Also installs musterrestd's dependencies (the `api` extra).
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-$ROOT/.venv/bin/python}
if ! [ -x /usr/bin/chromium ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq chromium >/dev/null
fi
"$PY" -m pip install -q "playwright>=1.40" "starlette>=0.37" "uvicorn>=0.29" "PyJWT>=2.8" \
    "prometheus-client>=0.20" "jsonschema>=4.20"
/usr/bin/chromium --version 2>/dev/null || true
