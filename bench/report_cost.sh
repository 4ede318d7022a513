#!/usr/bin/env bash
# What reporting costs the training steps: the main job (configs/main_job.toml, 2 ranks, ddp, one
# thread each, on the bundled sample) with --report-to tensorboard (the default), beside the same
# with MLflow (a tracking server of .venv's mlflow on 127.0.0.1, sqlite) and with MLflow and W&B
# (offline: the companion process on the same cores), alternating, ROUNDS rounds. Prints a line per
# run and a table of the means: the steps' seconds and samples/s (results.json's
# train_step_seconds, train_step_samples_per_second) and the mean logged step time. The runs go to
# OUT (default results/report-cost, not kept by git). OPTIONS are more `mpibert train` options,
# which win over the main job's (the worst case for reporting: a metrics line every step of a small
# model, "--model-config tests/fixtures/model/config.json --logging-steps 1 --max-steps 300").
# docs/benchmarks.md has the figures.
#   bash bench/report_cost.sh [ROUNDS] [OUT] [OPTIONS]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
rounds=${1:-3}
out=${2:-results/report-cost}
read -r -a options <<< "${3:-}"
python=${MPIBERT_TOOLS_PYTHON:-.venv/bin/python3}
export MPIBERT_TOOLS_PYTHON=$python
rm -rf "$out"
mkdir -p "$out"
bash scripts/sample_shards.sh "$out/sample" > /dev/null
port=$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$python" -m mlflow server --backend-store-uri "sqlite:///$(pwd)/$out/mlflow.db" --host 127.0.0.1 --port "$port" \
  --workers 1 > "$out/mlflow-server.log" 2>&1 &
server=$!
trap 'kill $server 2> /dev/null || true' EXIT
until curl -sf "http://127.0.0.1:$port/health" > /dev/null; do sleep 0.5; done

train() {  # NAME REPORT_TO [VAR=VALUE...]
  local name=$1 report_to=$2
  shift 2
  env "$@" mpirun -n 2 --bind-to none build/bin/mpibert train --config configs/main_job.toml \
    --train-shards "$out/sample/shards/train" --eval-shards "$out/sample/shards/eval" --output-dir "$out/$name" \
    --report-to "$report_to" --log-level warn "${options[@]}" > "$out/$name.log" 2>&1
  "$python" - "$out/$name" <<'PY'
import json, sys
run = sys.argv[1]
results = json.load(open(run + "/results.json"))
steps = [json.loads(line)["step_time"] for line in open(run + "/metrics.jsonl") if '"step_time"' in line]
print(f"{run.rsplit('/', 1)[1]:24} steps {results['train_step_seconds']:7.2f} s  "
      f"{results['train_step_samples_per_second']:6.1f} samples/s  logged step time {sum(steps) / len(steps) * 1000:6.1f} ms")
PY
}
for round in $(seq 1 "$rounds"); do
  train "tensorboard-$round" tensorboard
  train "mlflow-$round" tensorboard,mlflow MLFLOW_TRACKING_URI="http://127.0.0.1:$port" MLFLOW_EXPERIMENT_NAME=report-cost
  train "mlflow-wandb-$round" tensorboard,mlflow,wandb MLFLOW_TRACKING_URI="http://127.0.0.1:$port" \
    MLFLOW_EXPERIMENT_NAME=report-cost WANDB_MODE=offline WANDB_PROJECT=report-cost
done
"$python" - "$out" "$rounds" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
print("\n| --report-to | runs | step seconds (mean, min-max) | step samples/s (mean) |")
print("|---|--:|--:|--:|")
for name, label in (("tensorboard", "tensorboard"), ("mlflow", "tensorboard,mlflow"),
                    ("mlflow-wandb", "tensorboard,mlflow,wandb (offline)")):
    runs = [json.load(open(f"{out}/{name}-{r}/results.json")) for r in range(1, rounds + 1)]
    seconds = [r["train_step_seconds"] for r in runs]
    rate = statistics.mean(r["train_step_samples_per_second"] for r in runs)
    print(f"| `{label}` | {rounds} | {statistics.mean(seconds):.2f} ({min(seconds):.2f}-{max(seconds):.2f}) | {rate:.1f} |")
PY
