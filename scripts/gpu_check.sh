#!/usr/bin/env bash
# The one-call device check (issue 14; docs/GPU.md says how to build, carry and run it).
#
#   scripts/gpu_check.sh [--parts DIR] [options of scripts/gpu_check.py: --device cuda|cpu --quick --out DIR ...]
#
# With --parts DIR (a bare lent GPU machine): the parts made by scripts/gpu_bundle.sh are joined in order,
# checked against bundle.sha256, and unpacked into $GPU_CHECK_ROOT (default /tmp/gpucheck): onnxruntime-gpu
# and the project's dependencies into site/, redis-server into redis/, the carried model cache into cache/.
# The machine's own python3 (torch and the CUDA 13 libraries) runs the check with site/ first on its path.
# Without --parts: the project's .venv runs it (a GPU host installed per docs/GPU.md, or CPU with --device cpu).
set -euo pipefail
cd "$(dirname "$0")/.."
PARTS=""
if [ "${1:-}" = "--parts" ]; then PARTS=$2; shift 2; fi
if [ -n "$PARTS" ]; then
  T=${GPU_CHECK_ROOT:-/tmp/gpucheck}
  mkdir -p "$T/site" "$T/redis" "$T/cache"
  python3 - "$PARTS" "$T" <<'PY'
import hashlib, io, pathlib, sys, tarfile, time
parts_dir, root = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
t0 = time.time()
parts = sorted(parts_dir.glob("part-*"))
data = b"".join(p.read_bytes() for p in parts)
want = (parts_dir / "bundle.sha256").read_text().split()[0]
if hashlib.sha256(data).hexdigest() != want:
    sys.exit(f"gpu_check: the {len(parts)} bundle parts do not match bundle.sha256 (a part missing or cut short)")
outer = tarfile.open(fileobj=io.BytesIO(data))
for member, dest in (("ort.tar.xz", "site"), ("site.tar.xz", "site"), ("redis.tar.xz", "redis"), ("cache.tar.xz", "cache")):
    inner = outer.extractfile(member)
    with tarfile.open(fileobj=inner, mode="r:xz") as t:
        t.extractall(root / dest, filter="tar")
print(f"gpu_check: bundle of {len(parts)} part(s), {len(data) >> 20} MB, unpacked in {time.time() - t0:.1f} s")
PY
  export PYTHONPATH="$T/site:$PWD"
  export PATH="$T/redis/usr/bin:$PATH"
  export LD_LIBRARY_PATH="$T/redis/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
  export TTSFARM_RUNTIME_MODEL_CACHE_DIR="$T/cache"
  PY=python3
else
  PY=${PYTHON:-.venv/bin/python}
fi
export PYTHONUNBUFFERED=1
exec "$PY" -m scripts.gpu_check "$@"  # from the repository root: the scripts import each other as scripts.*
