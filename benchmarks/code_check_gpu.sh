#!/usr/bin/env bash
# A pull request that plants a slowdown, checked on a GPU as a team's runner would: a repository made here with the
# example CNN (examples/keras_cnn.py) as the team's model, and a pull request that adds a LayerNormalization after
# every convolution block (PLANT every), or one before the pooling (PLANT last: a smaller slowdown); PLANT script
# checks the team's plain PyTorch training script instead (examples/torch_ddp_train.py), its default width doubled. `stepwatch
# code-check --aa` measures the merge base against the head, interleaved, with the merge base checked out twice
# (the A/A), on one interpreter and a shared compile cache. The H100's runs: data/reference/h100-2026-11-26-code-check.
#
#   bash benchmarks/code_check_gpu.sh OUT [PRESET] [DEVICE] [TRIALS] [PLANT]
#
# OUT gets the report, the log and the check's rows (code-check.tgz). On the GPU host, after
# `source .gpu-carry/setup.sh` (../shared/gpu/README.md); on a CPU, `bash benchmarks/code_check_gpu.sh /tmp/out tiny
# cpu 2` runs the same steps small.
set -euo pipefail
out=$(realpath -m "$1"); preset=${2:-full}; device=${3:-gpu}; trials=${4:-3}; plant=${5:-every}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
team=$(mktemp -d)/team
mkdir -p "$team/models"
cp "$root/examples/keras_cnn.py" "$team/models/cnn.py"
cd "$team"
git init -q -b main
git config user.email ci@example.com
git config user.name ci
if [ "$plant" = script ]; then
  # The team's plain PyTorch training script (examples/torch_ddp_train.py), and a pull request that doubles its
  # network's default width.
  cp "$root/examples/torch_ddp_train.py" train.py
  rm -r models
  printf 'models = ["train.py"]\nkeras-backend = "torch"\ndevice = "%s"\ntrials = %s\n' "$device" "$trials" > stepwatch.toml
  git add -A
  git commit -qm "the team's training script"
  git checkout -qb planted
  grep -q 'parser.add_argument("--width", type=int, default=16)' train.py
  sed -i 's/parser.add_argument("--width", type=int, default=16)/parser.add_argument("--width", type=int, default=32)/' train.py
  git commit -qam "A wider network by default"
else
  cat > stepwatch.toml <<EOF
models = ["models/cnn.py:cifar_cnn"]
keras-backend = "jax"
xla = ["on"]
precision = ["mixed_bfloat16"]
preset = "$preset"
device = "$device"
batch = [256]
trials = $trials
EOF
  git add -A
  git commit -qm "the team's model"
  git checkout -qb planted
  python3 - "$plant" <<'EOF'
import sys
from pathlib import Path
path = Path("models/cnn.py")
text = path.read_text()
relu, pool = "        x = keras.layers.ReLU()(x)\n", "    x = keras.layers.GlobalAveragePooling2D()(x)\n"
assert relu in text and pool in text
if sys.argv[1] == "every":
    text = text.replace(relu, relu + "        x = keras.layers.LayerNormalization()(x)\n")
elif sys.argv[1] == "broken":  # a head that raises at import: the check says so first, after one trial of it
    text += "\nDEFAULT_WIDTHS = widths_for(\"full\")\n"
else:
    text = text.replace(pool, "    x = keras.layers.LayerNormalization()(x)\n" + pool)
path.write_text(text)
EOF
  git commit -qam "A LayerNormalization ($plant)"
fi
python3 -m stepwatch --version
set +e
python3 -m stepwatch code-check --aa --compile-cache "$team/cache" --format markdown --out "$out/report.md" \
  > "$out/log.txt" 2>&1
echo "exit code $?" >> "$out/log.txt"
set -e
git worktree list >> "$out/log.txt"
tar czf "$out/code-check.tgz" -C "$team" data
tail -n 3 "$out/log.txt"
