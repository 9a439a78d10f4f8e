#!/usr/bin/env bash
# Install Muster with its test dependencies into a virtualenv, run the static checks (ruff, mypy)
# and then the whole test suite.
#   scripts/test.sh [pytest args...]
# VENV (default .venv) is created with the system python3 so that the non-root test users
# can execute the commands it contains (a python under /root would not be reachable).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-/usr/bin/python3}
[ -x "$PY" ] || PY=python3
EDITABLE=-e
if [ -z "${VENV:-}" ]; then
  VENV=.venv
  # The identity tests run commands as unprivileged users: they must be able to reach the
  # virtualenv and the package. A checkout they cannot read (e.g. under /root) gets its
  # virtualenv in /opt, with the package copied into it instead of linked.
  if [ "$(id -u)" = 0 ] && id nobody >/dev/null 2>&1 && \
     ! runuser -u nobody -- test -r "$PWD/src/muster/__init__.py" 2>/dev/null; then
    VENV=/opt/muster-test-venv
    EDITABLE=
  fi
fi
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --disable-pip-version-check $EDITABLE '.[test,tools,api,sim,postgres]'
# compile bytecode so CLI start-up is measured and felt as users will (PYTHONDONTWRITEBYTECODE
# may be set in some environments)
"$VENV/bin/python" -m compileall -q src >/dev/null 2>&1 || true
# the Slurm commands start Python without `site` (-S): ~2 ms less per call (muster/launchers.py)
"$VENV/bin/python" -m muster.launchers "$VENV/bin"
if [ "$(id -u)" = 0 ]; then
  # the dashboard test drives Debian's Chromium (never a downloaded browser)
  [ -x /usr/bin/chromium ] || PYTHON="$VENV/bin/python" sh scripts/install-browser.sh
  # the PostgreSQL store tests start a private server with Debian's initdb/pg_ctl (tests/pg.py)
  if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  fi
  export MUSTER_REQUIRE_POSTGRES=1  # installed: its tests must run, not skip
  # the container tests run Debian's runc (rootless, as the job's user) on busybox-static
  # images; umoci/skopeo unpack and pull OCI images; uidmap's newuidmap maps the user's own
  # ids inside; squashfs-tools makes and unpacks enroot images (tests/e2e/test_containers.py,
  # tests/e2e/test_container_squashfs.py)
  if ! command -v runc >/dev/null || ! command -v busybox >/dev/null || \
     ! command -v umoci >/dev/null || ! command -v skopeo >/dev/null || \
     ! command -v newuidmap >/dev/null || ! command -v mksquashfs >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq runc busybox-static umoci skopeo \
      uidmap squashfs-tools >/dev/null
  fi
  # the identity tests submit as two unprivileged users
  for u in mustertest mustertest2; do
    id "$u" >/dev/null 2>&1 || useradd -m "$u"
  done
fi
# static checks first, failing fast with their findings: ruff (rules in pyproject.toml) and mypy
# (strict on core, model and lifecycle; regular mode on the rest of src/muster)
"$VENV/bin/python" -m ruff check src tests bench
"$VENV/bin/python" -m mypy
# two workers (this is a 2-core machine); a module's tests stay on one worker, so the private
# cluster a module starts is started once
exec "$VENV/bin/python" -m pytest -q -n 2 --dist loadfile "$@"
