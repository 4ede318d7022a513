#!/usr/bin/env bash
# The one command a machine with an NVIDIA GPU runs after `bash scripts/build.sh`:
#   1. what `mpibert env` sees; an NVIDIA driver (/proc/driver/nvidia) with no GPU visible to
#      mpibert is a failure (a driver older than CUDA 13's, CUDA_VISIBLE_DEVICES, a container
#      started without its GPUs), no driver at all is "nothing to check";
#   2. the GPU tests (build/bin/test_gpu under mpiexec -n 1);
#   3. short training runs of the fixture's tiny BERT (6 steps of global batch 16, gradient
#      accumulation 2), each compared with what it must equal:
#        1 rank on the GPU                      against 1 rank on the CPU   (max |w| difference)
#        2 ranks x {ddp, zero1}, MPI on 1 GPU   against 1 rank on the GPU
#        2 ranks x {ddp, zero1}, NCCL           against 1 rank on the GPU   (with 2 GPUs or more)
#        a run stopped at step 3 and resumed    against the uninterrupted run (bit for bit: RNG)
#        evaluation on the GPU                  against the CPU's, same checkpoint (EM/F1)
#        a profiled run                         its trace holds our phases (and GPU kernels)
#      printed as one table;
#   4. unless --skip-throughput, STEPS (100) bf16 steps of bert-base at batch BATCH (32) on the
#      bundled SQuAD v1.1 dev features: samples/s and peak GPU memory.
# Exits 1 on any failed check. `--device cpu` runs steps 3 on the CPU in place of the GPU (ctest
# gpu_check.cpu), so that the script itself is tested where no GPU is.
#   scripts/gpu_check.sh [--device cuda|cpu] [--skip-throughput]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
device=cuda
throughput=1
while [ $# -gt 0 ]; do
  case $1 in
    --device) device=$2; shift 2 ;;
    --skip-throughput) throughput=0; shift ;;
    *) echo "usage: scripts/gpu_check.sh [--device cuda|cpu] [--skip-throughput]" >&2; exit 2 ;;
  esac
done
[ "$device" = cuda ] || [ "$device" = cpu ] || { echo "gpu_check: --device cuda or cpu" >&2; exit 2; }
bin=${MPIBERT_BIN_DIR:-build/bin}
[ -x "$bin/mpibert" ] || { echo "gpu_check: $bin/mpibert not found: run bash scripts/build.sh first" >&2; exit 1; }
py=/usr/bin/python3
[ -x "$py" ] || py=python3

echo "== mpibert env"
env_json=$("$bin/mpibert" env)
echo "$env_json"
gpus=$("$py" -c 'import json, sys; d = json.loads(sys.argv[1])["devices"]; print(d.get("count", 0) if d["type"] == "cuda" else 0)' "$env_json")
if [ "$device" = cuda ] && [ "$gpus" -eq 0 ]; then
  if [ -e /proc/driver/nvidia ]; then
    echo "gpu_check: FAIL: an NVIDIA driver is loaded ($(head -1 /proc/driver/nvidia/version 2>/dev/null)) but mpibert sees" \
         "no GPU: a driver older than CUDA 13's, CUDA_VISIBLE_DEVICES, or a container without its GPUs" >&2
    exit 1
  fi
  echo "gpu_check: no NVIDIA driver and no GPU here; nothing to check (--device cpu runs the checks on the CPU)"
  exit 0
fi

work=${GPU_CHECK_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX")}
mkdir -p "$work"
table=$work/table.tsv
: > "$table"
failed=0
# record CHECK AGAINST MEASURED LIMIT OK: one row of the table.
record() {
  printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$([ "$5" = 1 ] && echo pass || echo FAIL)" >> "$table"
  [ "$5" = 1 ] || failed=1
}
# logged NAME COMMAND...: runs it with its output in $work/NAME.log; on failure shows the log's end.
logged() {
  local name=$1; shift
  if "$@" > "$work/$name.log" 2>&1; then return 0; fi
  echo "gpu_check: $name failed:"; tail -20 "$work/$name.log"; return 1
}

if [ "$device" = cuda ]; then
  echo "== GPU tests"
  if mpiexec -n 1 --bind-to none "$bin/test_gpu"; then record "GPU tests (test_gpu)" "HF fixture, CPU" "all" "-" 1
  else record "GPU tests (test_gpu)" "HF fixture, CPU" "failures above" "-" 0; fi
fi

echo "== short runs of the fixture model on $device (logs in $work)"
fixture=${MPIBERT_FIXTURES:-tests/fixtures}/model/config.json
vocab=data_prep/data/bert-base-uncased/vocab.txt
squad=data_prep/data/squad/dev-v1.1.json.gz
"$py" - "$fixture" "$work" <<'PY'
import json, sys
config = json.load(open(sys.argv[1]))
for name, dropout in (("config.json", 0.0), ("config-dropout.json", 0.1)):
    config["hidden_dropout_prob"] = config["attention_probs_dropout_prob"] = dropout
    json.dump(config, open("%s/%s" % (sys.argv[2], name), "w"))
PY
prep=(--vocab "$vocab" --max-seq-length 128 --doc-stride 64 --log-level warn)
logged split "$bin/mpibert-prep" split "$squad" --articles 0:3 --out "$work/train.json"
logged split "$bin/mpibert-prep" split "$squad" --articles 3:4 --out "$work/eval.json"
logged prep "$bin/mpibert-prep" --input "$work/train.json" --out "$work/shards/train" --split train "${prep[@]}"
logged prep "$bin/mpibert-prep" --input "$work/eval.json" --out "$work/shards/eval" --split eval "${prep[@]}"
common=(--vocab "$vocab" --train-shards "$work/shards/train" --threads 1 --padding full --learning-rate 1e-3 --seed 7
        --logging-steps 1 --max-steps 6 --save-total-limit 1 --log-level warn)
one_rank=(--batch-size 8 --gradient-accumulation 2)
two_ranks=(--batch-size 4 --gradient-accumulation 2)
mpi2=(mpiexec -n 2 --oversubscribe --bind-to none)
run_ok() { [ -f "$work/$1/checkpoint-6/model.safetensors" ]; }
# compare NAME A B LIMIT AGAINST: the weights of two runs' last checkpoints, within LIMIT.
compare() {
  local name=$1 a=$2 b=$3 limit=$4 against=$5 out
  if ! run_ok "$a" || ! run_ok "$b"; then record "$name" "$against" "run failed (logs)" "$limit" 0; return; fi
  out=$("$py" scripts/compare_weights.py "$work/$a/checkpoint-6" "$work/$b/checkpoint-6") || { record "$name" "$against" "$out" "$limit" 0; return; }
  local difference=${out%% *}
  record "$name" "$against" "max abs weight diff $difference" "$limit" \
    "$("$py" -c 'import sys; print(int(float(sys.argv[1]) <= float(sys.argv[2])))' "$difference" "$limit")"
}

# Runs of an earlier check in GPU_CHECK_DIR are replaced, not continued.
rm -rf "$work"/{cpu-1,dev-1,dev-2-*,straight,resumed,eval-*,profile}
logged cpu-1 "$bin/mpibert" train --model-config "$work/config.json" "${common[@]}" "${one_rank[@]}" --device cpu --output-dir "$work/cpu-1" || true
logged dev-1 "$bin/mpibert" train --model-config "$work/config.json" "${common[@]}" "${one_rank[@]}" --device "$device" --output-dir "$work/dev-1" || true
compare "1 rank on $device" cpu-1 dev-1 "$([ "$device" = cuda ] && echo 1e-4 || echo 0)" "1 rank on the CPU"
comms=(mpi)
[ "$gpus" -ge 2 ] && comms+=(nccl)
for strategy in ddp zero1; do
  for comm in "${comms[@]}"; do
    name=dev-2-$strategy-$comm
    logged "$name" "${mpi2[@]}" "$bin/mpibert" train --model-config "$work/config.json" "${common[@]}" "${two_ranks[@]}" \
      --device "$device" --comm "$comm" --strategy "$strategy" --output-dir "$work/$name" || true
    compare "2 ranks $strategy, $comm" dev-1 "$name" 1e-5 "1 rank on $device"
  done
done

# Resume: dropout on, so that the RNG state (CPU and CUDA) must come back with the checkpoint.
dropout=(--model-config "$work/config-dropout.json" "${common[@]}" "${one_rank[@]}" --device "$device")
logged straight "$bin/mpibert" train "${dropout[@]}" --output-dir "$work/straight" || true
logged stopped "$bin/mpibert" train "${dropout[@]}" --stop-after-steps 3 --output-dir "$work/resumed" || true
logged resumed "$bin/mpibert" train "${dropout[@]}" --resume auto --output-dir "$work/resumed" || true
compare "checkpoint at step 3, resumed" straight resumed 0 "the run never stopped"

# Evaluation of one checkpoint on the device and on the CPU.
if run_ok dev-1; then
  for where in "$device" cpu; do
    logged "eval-$where" "$bin/mpibert" eval --model "$work/dev-1/checkpoint-6" --data "$work/shards/eval" --device "$where" \
      --output-dir "$work/eval-$where" || true
  done
  verdict=$("$py" - "$work/eval-$device" "$work/eval-cpu" <<'PY'
import json, sys
try:
    a, b = (json.load(open(d + "/eval_results.json")) for d in sys.argv[1:])
    p, q = (json.load(open(d + "/predictions.json")) for d in sys.argv[1:])
except (OSError, ValueError) as e:
    print("0\tno results (%s)" % e); sys.exit()
differ = sum(1 for k in p if p[k] != q.get(k))
ok = abs(a["eval_f1"] - b["eval_f1"]) <= 0.1 and differ <= max(1, len(p) // 200)
print("%d\tF1 %.3f vs %.3f, %d of %d answers differ" % (ok, a["eval_f1"], b["eval_f1"], differ, len(p)))
PY
)
  record "evaluation on $device" "the CPU's, same checkpoint" "${verdict#*$'\t'}" "F1 0.1, 0.5% answers" "${verdict%%$'\t'*}"
else
  record "evaluation on $device" "the CPU's, same checkpoint" "no checkpoint (dev-1 failed)" "-" 0
fi

# A profile of steps 2-3: our phases, and on a GPU its kernels.
logged profile "$bin/mpibert" train --model-config "$work/config.json" "${common[@]}" "${one_rank[@]}" --device "$device" \
  --profile --profile-wait 1 --profile-warmup 1 --profile-active 2 --output-dir "$work/profile" || true
verdict=$("$py" - "$work/profile/profile/trace.json" "$device" <<'PY'
import json, sys
try:
    events = json.load(open(sys.argv[1]))["traceEvents"]
except (OSError, ValueError, KeyError) as e:
    print("0\tno trace (%s)" % e); sys.exit()
names = {e.get("name") for e in events}
phases = [p for p in ("mpibert::forward", "mpibert::backward", "mpibert::optimizer") if p in names]
kernels = sum(1 for e in events if e.get("cat") == "kernel")
ok = len(phases) == 3 and (kernels > 0 or sys.argv[2] != "cuda")
print("%d\t%d events, phases %s, %d GPU kernels" % (ok, len(events), "/".join(p.split("::")[1] for p in phases), kernels))
PY
)
record "profile (Chrome trace)" "our phases$([ "$device" = cuda ] && echo ', GPU kernels')" "${verdict#*$'\t'}" "-" "${verdict%%$'\t'*}"

echo
echo "| check | against | measured | limit | result |"
echo "|---|---|---|---|---|"
while IFS=$'\t' read -r check against measured limit result; do
  echo "| $check | $against | $measured | $limit | $result |"
done < "$table"
echo

if [ "$device" = cuda ] && [ "$throughput" = 1 ]; then
  echo "== bert-base training steps on the GPU"
  if [ ! -f "$work/bert-shards/manifest.json" ]; then
    mpirun -n 2 --bind-to none "$bin/mpibert-prep" --input "$squad" --vocab "$vocab" --out "$work/bert-shards" --split train --log-level warn
  fi
  rm -rf "$work/bert-base"
  "$bin/mpibert" train --model-config bench/bert-base-config.json --vocab "$vocab" --train-shards "$work/bert-shards" \
    --output-dir "$work/bert-base" --device cuda --bf16 --batch-size "${BATCH:-32}" --max-steps "${STEPS:-100}" \
    --learning-rate 4e-5 --logging-steps 20 --save-total-limit 1
  "$py" - "$work/bert-base/results.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
d = r["environment"]["devices"]
print("gpu_check: %s, %d steps of batch %d: %.1f samples/s (steps only), peak GPU memory %.2f GiB"
      % (d.get("name"), r["global_step"], r["parameters"]["batch_size"], r["train_step_samples_per_second"],
         r.get("peak_gpu_memory_bytes", 0) / 2**30))
PY
fi
echo "gpu_check: runs and logs in $work"
if [ $failed = 1 ]; then echo "gpu_check: FAILED (table above)"; exit 1; fi
echo "gpu_check: every check passed"
