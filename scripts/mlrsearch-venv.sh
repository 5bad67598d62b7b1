#!/usr/bin/env bash
# Installs FD.io's reference MLRsearch (PyPI MLRsearch 1.2.1) into a venv that
# internal/search's reference test (mlrref_test.go) runs. Idempotent: exits 0 when present.
set -euo pipefail

VENV=/var/cache/cnibench/mlrsearch-1.2.1/venv
PY="$VENV/bin/python3"

if [ -x "$PY" ] && "$PY" -c 'import importlib.metadata as m, sys; sys.exit(m.version("MLRsearch") != "1.2.1")' 2>/dev/null; then
  echo "mlrsearch-venv: MLRsearch 1.2.1 present in $VENV"
  exit 0
fi
if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "mlrsearch-venv: python3 -m venv is unavailable; run as root to install python3-venv" >&2
    exit 2
  fi
  apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
fi
rm -rf "$VENV"
mkdir -p "$(dirname "$VENV")"
python3 -m venv "$VENV"
"$VENV/bin/pip" install -q --disable-pip-version-check MLRsearch==1.2.1
echo "mlrsearch-venv: installed MLRsearch 1.2.1 into $VENV"
