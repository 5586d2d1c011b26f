#!/bin/bash
# The GPU checks in one command, for a machine whose Python already has PyTorch with CUDA
# (a cluster node, a container, an offline machine): the CUDA suite, the measured peak, the
# GPU benchmark rows and the shipped G2P recipe, everything packed into OUT/evidence.tgz.
#
#   bash scripts/gpu_checks.sh OUT [WHEELS]
#
# WHEELS (default .whl): a folder of wheels for the packages that Python lacks (pydantic,
# torchdata, fastapi, ... fetched elsewhere with `pip download`); they are installed into
# /tmp/trainforge-site without touching the machine's own packages. Each step has its own time
# limit, so one hang never hides the others; the whole script ends within about 9 minutes.
# STEPS (default "suite peak bench g2p") picks the steps to run and BENCH_ROWS the benchmark
# rows (default vit,input,checkpoint,g2p), for a second, shorter call.
set -u
STEPS=" ${STEPS:-suite peak bench g2p} "
OUT=${1:?usage: bash scripts/gpu_checks.sh OUT [WHEELS]}
WHEELS=${2:-.whl}
PY=${PYTHON:-python3}
E=$(mktemp -d)/evidence
mkdir -p "$E" "$OUT"
SITE=/tmp/trainforge-site
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  if compgen -G "$WHEELS/*.whl" >/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$SITE" \
      "$WHEELS"/*.whl && echo "wheels from $WHEELS installed into $SITE"
  fi
  export PYTHONPATH="$PWD/src:$SITE" PYTHONUNBUFFERED=1
  "$PY" -c "import torch, trainforge.cli; print('torch', torch.__version__, torch.cuda.get_device_name())"
  if [[ $STEPS == *" suite "* ]]; then
  echo "=== the CUDA suite (pytest -m gpu)"
  parallel=()
  "$PY" -c "import xdist" 2>/dev/null && parallel=(-n 8)
  timeout 260 "$PY" -m pytest -m gpu -rfEs -v --timeout 200 "${parallel[@]}" --durations=15 \
    --continue-on-collection-errors \
    tests/gpu tests/web/test_real_runs_gpu.py tests/benchmarks tests/engine/test_batch_fit.py \
    tests/export/test_pieces.py --junitxml="$E/test-gpu.xml" >"$E/test-gpu.log" 2>&1
  echo "test-gpu exit $?"
  grep -E "^(FAILED|ERROR)|^E  .*(Error|assert)| passed| failed" "$E/test-gpu.log" | head -40
  fi
  if [[ $STEPS == *" peak "* ]]; then
  echo "=== the measured peak"
  timeout 60 "$PY" -m trainforge detect --peak --precision bf16 2>&1 | tail -4
  fi
  if [[ $STEPS == *" bench "* ]]; then
  echo "=== the GPU benchmark rows"
  timeout 240 "$PY" benchmarks/gpu_suite.py "$E/bench" --g2p-budget-s 45 --rows "${BENCH_ROWS:-vit,input,checkpoint,g2p}" >"$E/bench-gpu.log" 2>&1
  echo "bench-gpu exit $?"
  cat "$E/bench/summary.md" 2>/dev/null
  fi
  if [[ $STEPS == *" g2p "* ]]; then
  echo "=== the shipped G2P recipe"
  timeout 200 "$PY" -m trainforge train config/g2p_cmudict.yaml --set output.overwrite=true \
    --set output.dir="$E/runs" --set output.models_dir="$E/models" \
    --set logging.mlflow=false --set logging.wandb=false >"$E/g2p.log" 2>&1
  echo "g2p exit $?"
  grep -E "^(validation|test|done)" "$E/g2p.log"
  fi
  date -u
} >"$E/session.log" 2>&1
tar czf "$OUT/evidence.tgz" --exclude='*.safetensors' --exclude='*.pt' --exclude=dcp \
  -C "$(dirname "$E")" evidence
tail -c 11000 "$E/session.log"
