#!/usr/bin/env bash
# Every GPU check of this round in one call of under 10 minutes on an H100 or H200, the parts in order of what matters
# most, each under its own timeout and none started past the deadline (BUDGET_S, default 560 s from the start):
#
#   1. plain PyTorch llama 8b-4l bf16, sequence 8192, batch 2, against a bare loop of the same LlamaForCausalLM
#      (the harness's share) and its MFU beside torchtitan's 33-39%;
#   2. fp8 (torchao) against bf16, two seeds a side (speed and numerics verdicts), and attention auto against math,
#      the kernels named;
#   3. GPT-OSS 20B's mixture of experts at 2 of its 24 layers (20b-2l, sequence 4096, batch 1): experts grouped_mm
#      beside a bare loop of the same GptOssForCausalLM, and grouped_mm against eager (the kernel and the routing
#      balance in every row);
#   4. --find-max-batch for JAX ResNet-50 bf16 and plain PyTorch resnet50_v1.5, each timed to its answer;
#   5. Keras on JAX llama 8b-4l bf16, if time remains.
#
#   bash benchmarks/gpu_checks.sh OUT            # on the GPU host
#   PARTS="4 5" bash benchmarks/gpu_checks.sh OUT  # a second call: only these parts
#   bash benchmarks/gpu_checks.sh OUT cpu        # the same steps small on a CPU (tiny presets, no fp8: refused there)
#
# On the GPU host after `GPU_EXTRA_WHEELS='torchao==0.18.0' bash ../shared/gpu/prepare.sh` here and
# `source .gpu-carry/setup.sh` there (../shared/gpu/README.md). OUT gets at most 8 files: log.txt, the reports
# (harness-llama.txt, harness-moe.txt, fp8.md, attention.md, experts.md) and rows.tgz (every row and the store).
set -uo pipefail
out=$(realpath -m "$1"); scale=${2:-gpu}
root=$(cd "$(dirname "$0")/.." && pwd)
sw=${SW:-"python -m stepwatch"}
parts=${PARTS:-"1 2 3 4 5"}
deadline=$(( $(date +%s) + ${BUDGET_S:-560} ))
mkdir -p "$out/rows"
cd "$root"
if [ "$scale" = cpu ]; then
  device=cpu; llama=tiny; moe=(--preset tiny); precisions=mixed_bfloat16; steps=(--steps 20 --warmup 20 --window 10)
  search=(--models resnet50 --preset tiny --batch 8 --max-batch-memory 256MiB); trials=2
else
  device=gpu; llama=8b-4l; moe=(--preset 20b-2l --seq-len 4096 --batch 1); precisions=mixed_bfloat16,fp8
  steps=(--steps 20 --warmup 20 --window 10); search=(--suite gpu-backends --models resnet50 --preset 224 --batch 256)
  trials=2
fi

# part NAME SECONDS COMMAND...: COMMAND under a timeout of SECONDS, or of what is left before the deadline if less;
# skipped when under 30 s are left. Its exit status and time are logged; a failed part never stops the others.
part() {
  local name=$1 limit=$2 left start
  shift 2
  left=$(( deadline - $(date +%s) ))
  if (( left < 30 )); then echo "== $name: skipped, ${left} s left before the deadline"; return; fi
  (( limit > left )) && limit=$left
  echo "== $name (timeout ${limit} s)"
  start=$(date +%s)
  timeout "$limit" "$@"
  echo "== $name: exit $? in $(( $(date +%s) - start )) s"
}
wanted() { [[ " $parts " == *" $1 "* ]]; }
plain=(--keras-backend torch --loop pytorch --xla off --device "$device")

{
  echo "gpu_checks: parts $parts on $device, deadline in $(( deadline - $(date +%s) )) s"
  if wanted 1; then
    part "1. llama $llama: stepwatch against a bare loop" 200 python benchmarks/decoder_harness.py --device "$device" \
      --preset "$llama" --batch 2 --precision mixed_bfloat16 --steps 20 --warmup 20 --rounds 1 \
      | tee "$out/harness-llama.txt"
  fi
  if wanted 2; then
    part "2. llama $llama: bf16 and fp8, $trials seeds each; attention math" 240 $sw run --models llama \
      --preset "$llama" --batch 2 "${steps[@]}" --trials "$trials" "${plain[@]}" --precision "$precisions" \
      --attention auto --out "$out/rows"
    part "2. llama $llama: attention math" 90 $sw run --models llama --preset "$llama" --batch 2 "${steps[@]}" \
      --trials 1 "${plain[@]}" --precision mixed_bfloat16 --attention math --out "$out/rows"
  fi
  if wanted 3; then
    part "3. gpt_oss ${moe[*]}: grouped_mm against a bare loop" 150 python benchmarks/decoder_harness.py --model gpt_oss \
      --device "$device" "${moe[@]}" --precision mixed_bfloat16 --experts grouped_mm --steps 10 --warmup 20 \
      --rounds 1 | tee "$out/harness-moe.txt"
    part "3. gpt_oss ${moe[*]}: experts eager" 90 $sw run --suite moe --models gpt_oss "${moe[@]}" "${steps[@]}" --trials 1 \
      "${plain[@]}" --precision mixed_bfloat16 --experts eager --out "$out/rows"
    part "3. gpt_oss ${moe[*]}: experts grouped_mm" 90 $sw run --suite moe --models gpt_oss "${moe[@]}" "${steps[@]}" --trials 1 \
      "${plain[@]}" --precision mixed_bfloat16 --experts grouped_mm --out "$out/rows"
  fi
  if wanted 4; then
    sides=("jax fit on" "torch pytorch off")
    [ "$device" = cpu ] && sides=("jax fit on")  # on a CPU the search reads XLA's memory analysis: JAX only
    for side in "${sides[@]}"; do
      read -r backend loop xla <<<"$side"
      part "4. --find-max-batch, $backend ($loop, xla $xla)" 170 $sw run "${search[@]}" --device "$device" --trials 1 \
        "${steps[@]}" --keras-backend "$backend" --loop "$loop" --xla "$xla" --precision mixed_bfloat16 \
        --find-max-batch --max-batch-budget 60 --max-batch-probe-limit 60 --out "$out/rows"
    done
  fi
  if wanted 5; then
    part "5. llama $llama: Keras on JAX" 150 $sw run --models llama --preset "$llama" --batch 2 "${steps[@]}" \
      --trials 1 --device "$device" --keras-backend jax --loop fit --xla on --precision mixed_bfloat16 \
      --out "$out/rows"
  fi
  db="$out/rows/checks.duckdb"
  echo "== the store and the reports"
  $sw ingest "$out/rows" --db "$db"
  fp8=$([ "$device" = cpu ] && echo mixed_bfloat16 || echo fp8)
  $sw compare --baseline model=llama,loop=pytorch,attention=auto,precision=mixed_bfloat16 \
    --candidate "model=llama,loop=pytorch,attention=auto,precision=$fp8" --db "$db" --format markdown \
    --out "$out/fp8.md" || true
  $sw compare --baseline model=llama,loop=pytorch,precision=mixed_bfloat16,attention=auto \
    --candidate model=llama,loop=pytorch,precision=mixed_bfloat16,attention=math --db "$db" --format markdown \
    --out "$out/attention.md" || true
  $sw compare --baseline model=gpt_oss,experts=grouped_mm --candidate model=gpt_oss,experts=eager --db "$db" \
    --format markdown --out "$out/experts.md" || true
  $sw query "SELECT model, keras_backend, loop, precision, attention, attention_kernel, experts_kernel,
    routing_max_load, round(units_per_sec) AS units_s, round(100 * mfu, 1) AS mfu_pct,
    round(peak_memory_bytes / 1e9, 1) AS peak_gb, max_per_device_batch, max_batch_ended, status FROM runs
    ORDER BY 1, 2, 3, 4, 5" --db "$db" || true
  echo "gpu_checks: done, $(( deadline - $(date +%s) )) s before the deadline"
} 2>&1 | tee "$out/log.txt"
tar -C "$out" -czf "$out/rows.tgz" rows && rm -rf "$out/rows"
