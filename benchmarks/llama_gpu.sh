#!/usr/bin/env bash
# The Llama workload's GPU checks, in one call sized for a few device minutes (an H100 or H200): the plain PyTorch
# `8b-4l` trial against a bare loop of the same LlamaForCausalLM (the harness's share) with its MFU beside
# torchtitan's 33-39%; bf16 against fp8 (torchao) with the speed and numerics verdicts; attention auto against math;
# JAX through Keras at the same preset.
#
#   bash benchmarks/llama_gpu.sh OUT [PRESET] [DEVICE] [TRIALS]
#
# On the GPU host after `GPU_EXTRA_WHEELS='torchao==0.18.0' bash ../shared/gpu/prepare.sh` here and
# `source .gpu-carry/setup.sh` there (../shared/gpu/README.md); OUT gets the reports, the log and the rows
# (llama.tgz). On a CPU, `bash benchmarks/llama_gpu.sh /tmp/out tiny cpu 2` runs the same steps small, without fp8
# (refused on a CPU).
set -euo pipefail
out=$(realpath -m "$1"); preset=${2:-8b-4l}; device=${3:-gpu}; trials=${4:-2}
root=$(cd "$(dirname "$0")/.." && pwd)
sw=${SW:-"python -m stepwatch"}
mkdir -p "$out/rows"
cd "$root"
precisions=mixed_bfloat16,fp8
[ "$device" = cpu ] && precisions=mixed_bfloat16
size=(--preset "$preset" --device "$device" --batch 2 --steps 30 --warmup 20 --window 10 --trials "$trials")
{
  echo "== harness: stepwatch against a bare loop"
  timeout 600 python benchmarks/decoder_harness.py --device "$device" --preset "$preset" --batch 2 \
    --precision mixed_bfloat16 --steps 30 --warmup 20 --rounds 2 || echo "harness: exit $?"
  echo "== plain PyTorch: bf16 and fp8 x attention auto and math"
  timeout 900 $sw run --suite gpu-nightly --models llama "${size[@]}" --keras-backend torch --loop pytorch \
    --precision "$precisions" --attention auto,math --xla off --out "$out/rows" || echo "plain run: exit $?"
  echo "== JAX through Keras: bf16"
  timeout 600 $sw run --suite gpu-backends --models llama "${size[@]}" --keras-backend jax --loop fit --precision mixed_bfloat16 \
    --attention auto --xla on --out "$out/rows" || echo "jax run: exit $?"
  db="$out/llama.duckdb"
  $sw ingest "$out/rows" --db "$db"
  echo "== fp8 against bf16 (speed and numerics)"
  $sw compare --baseline loop=pytorch,attention=auto,precision=mixed_bfloat16 \
    --candidate loop=pytorch,attention=auto,precision=fp8 --db "$db" --out "$out/fp8.md" || true
  echo "== attention auto against math"
  $sw compare --baseline loop=pytorch,precision=mixed_bfloat16,attention=auto \
    --candidate loop=pytorch,precision=mixed_bfloat16,attention=math --db "$db" --out "$out/attention.md" || true
  $sw query "SELECT keras_backend, loop, precision, attention, attention_kernel, round(units_per_sec) AS tokens_s,
    round(100 * mfu, 1) AS mfu_pct, round(peak_memory_bytes / 1e9, 1) AS peak_gb, status FROM runs ORDER BY 1, 2, 3, 4" \
    --db "$db" || true
} 2>&1 | tee "$out/log.txt"
tar -C "$out" -czf "$out/llama.tgz" rows llama.duckdb
