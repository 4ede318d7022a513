#!/usr/bin/env bash
# What to run on a machine with an NVIDIA GPU after `bash scripts/build.sh`:
#  1. the device and the library versions mpibert sees (mpibert env);
#  2. the GPU tests (tests/test_gpu.cpp, under mpiexec -n 1): the fixture model on CUDA against HF's
#     values (fp32 with TF32 off within 1e-5; bf16 autocast within the bounds stated there), one-rank
#     NCCL and MPI communicator round trips on CUDA tensors, 20 training steps on CPU and GPU;
#  3. STEPS (default 100) training steps of bert-base (random init, bf16, batch BATCH, default 32) on
#     the bundled SQuAD v1.1 dev features: samples/s and peak GPU memory from results.json.
# Without a GPU it says so and exits 0.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
bin=${MPIBERT_BIN_DIR:-build/bin}
[ -x "$bin/mpibert" ] || { echo "gpu_check: $bin/mpibert not found: run bash scripts/build.sh first" >&2; exit 1; }

env_json=$("$bin/mpibert" env)
echo "$env_json"
if ! grep -q '"type": "cuda"' <<<"$env_json"; then
  echo "gpu_check: no CUDA GPU visible to this process; nothing to check here"
  exit 0
fi

echo "== GPU tests"
mpiexec -n 1 --bind-to none "$bin/test_gpu"

echo "== bert-base training steps on the GPU"
work=${GPU_CHECK_DIR:-$(mktemp -d)}
mkdir -p "$work"
if [ ! -f "$work/shards/manifest.json" ]; then
  mpirun -n 2 --bind-to none "$bin/mpibert-prep" --input data_prep/data/squad/dev-v1.1.json.gz \
    --vocab data_prep/data/bert-base-uncased/vocab.txt --out "$work/shards" --split train --log-level warn
fi
rm -rf "$work/run"
"$bin/mpibert" train --model-config bench/bert-base-config.json --vocab data_prep/data/bert-base-uncased/vocab.txt \
  --train-shards "$work/shards" --output-dir "$work/run" --device cuda --bf16 --batch-size "${BATCH:-32}" \
  --max-steps "${STEPS:-100}" --learning-rate 4e-5 --logging-steps 20 --save-total-limit 1
python3 - "$work/run/results.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
d = r["environment"]["devices"]
print("gpu_check: %s, %d steps of batch %d: %.1f samples/s (steps only), peak GPU memory %.2f GiB"
      % (d.get("name"), r["global_step"], r["parameters"]["batch_size"], r["train_step_samples_per_second"],
         r.get("peak_gpu_memory_bytes", 0) / 2**30))
PY
echo "gpu_check: run directory $work/run"
