#!/usr/bin/env bash
# The batch search on a GPU (an H100 or H200), in one call of a few device minutes: JAX ResNet-50 mixed_bfloat16
# (probes compiled, XLA's memory analysis against 75% of the device) and plain PyTorch ResNet-50 (torchvision's v1.5;
# probes that run, out-of-memory caught and the cache emptied), each timed from the command's start to its answer
# confirmed by a whole trial. OUT gets the log and the rows (their extras hold every probe).
#
#   bash benchmarks/max_batch_gpu.sh OUT      (SEARCH_TIMEOUT=400: seconds each side may take)
#
# On the GPU host after `bash ../shared/gpu/prepare.sh` here and `source .gpu-carry/setup.sh` there.
set -euo pipefail
out=$(realpath -m "$1")
root=$(cd "$(dirname "$0")/.." && pwd)
sw=${SW:-"python -m stepwatch"}
mkdir -p "$out/rows"
cd "$root"
size=(--suite gpu-backends --models resnet50 --preset 224 --batch 256 --trials 1 --steps 20 --warmup 20 --window 10)
{
  for side in "jax fit on" "torch pytorch off"; do
    read -r backend loop xla <<<"$side"
    echo "== $backend ($loop, xla $xla): --find-max-batch"
    start=$(date +%s)
    timeout "${SEARCH_TIMEOUT:-400}" $sw run "${size[@]}" --keras-backend "$backend" --loop "$loop" --xla "$xla" \
      --precision mixed_bfloat16 --find-max-batch --out "$out/rows" || echo "search: exit $?"
    echo "== $backend: answered in $(( $(date +%s) - start )) s (search, whole trial at the answer and the suite's trial)"
  done
  $sw ingest "$out/rows" --db "$out/max-batch.duckdb"
  $sw query "SELECT keras_backend, loop, per_device_batch, max_per_device_batch, max_batch_ended,
    json_extract(extras, '\$.max_batch_probes') AS probes FROM runs" --db "$out/max-batch.duckdb" || true
} 2>&1 | tee "$out/log.txt"
