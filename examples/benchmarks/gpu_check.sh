#!/usr/bin/env bash
# The GPU check in one run on a lent GPU machine (no network; Python 3.12 with torch): installs the wheels
# carried in .whl/ (faiss-cpu, zstandard, py3langid, xformers), runs gpu_check.py on what .gpu-data/ carries
# (see `make gpu-check-data`), then the CUDA tests. Rows go to $OUT (default: examples/benchmarks/results).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-examples/benchmarks/results}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
timeout "${CHECK_SECONDS:-400}" python3 examples/benchmarks/gpu_check.py --model-shape .gpu-data/model-shape \
  --sentences .gpu-data/sentences.txt.zst --out "$OUT" "$@" 2>&1 | tee "$OUT/gpu_check.log"
[ "${TEST_SECONDS:-100}" = 0 ] && exit 0
timeout "${TEST_SECONDS:-100}" python3 -m pytest -q -p no:cacheprovider tests/encoder/test_cuda.py tests/search/test_gemm.py \
  -k cuda 2>&1 | tail -25 | tee "$OUT/gpu_tests.log"
