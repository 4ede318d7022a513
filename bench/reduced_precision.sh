#!/usr/bin/env bash
# Reduced-precision communication (--reduce-dtype bf16; fsdp's --param-dtype bf16) against fp32,
# side by side, each pair run back to back:
#   sudo bash bench/reduced_precision.sh hosts [OUT]  # step time across 2 and 3 test hosts
#   bash bench/reduced_precision.sh f1 [OUT]          # the pretrained MiniLM fine-tune, EM/F1 over seeds
# hosts: the small BERT (configs/small-bert.json) trained across network-namespace test hosts
# (tests/cluster/hosts.sh: one rank each, TCP only) at each rate of RATES (Mbit/s, default
# "100 1000"), on 2 and 3 hosts, with every strategy of STRATEGIES (default ddp zero1 zero2 fsdp),
# fp32 then bf16 reduction (fsdp also bf16 reduction + bf16 parameter gathers). STEPS timed steps
# (default 12) after the first, batch BATCH (default 8) per rank, full padding, 25 MiB buckets.
# Writes OUT/<rate>-<p>h-<strategy>-<variant>/{results.json,metrics.jsonl,link.json} (default OUT
# results/scaling_model/measured-bf16, which the scaling model checks) and prints a Markdown table.
# Needs root and a build (bash scripts/build.sh); about 25 min on 2 cores. Run it on an idle machine.
# f1: scripts/pretrained_job.sh's fine-tune of all-MiniLM-L6-v2 (configs/pretrained_minilm.toml, 2
# ranks, 150 steps) for each seed of SEEDS (default "42 43 44") and reduction dtype of DTYPES
# (default "fp32 bf16"); RUNS="DTYPE:SEED ..." picks runs instead (e.g. "fp32:42 bf16:42"); writes
# OUT/mpibert-minilm-<dtype>-seed<S>/ (default OUT results/pretrained/reduce-dtype), keeping what
# the reports read, and prints EM/F1 per run and the means. About 10 min per run on 2 cores.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mode=${1:-}
source "$root/scripts/env.sh"
bin=${MPIBERT_BIN_DIR:-$root/build/bin}
vocab=$root/data_prep/data/bert-base-uncased/vocab.txt
[ -x "$bin/mpibert" ] || { echo "reduced_precision.sh: $bin/mpibert not built (bash scripts/build.sh)" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/mpibert-bf16.XXXXXX")
# A copy of the binary, so that a rebuild meanwhile cannot mix two versions.
cp -p "$bin/mpibert" "$bin/mpibert-prep" "$work/"

# The table: per run, the mean step time after the first step, the gradient bytes per step and the
# wait after backward per step, from its results.json and metrics.jsonl.
table() {  # OUT
  python3 - "$1" <<'PY'
import json, os, sys
out = sys.argv[1]
rows = []
for name in sorted(os.listdir(out)):
    run = os.path.join(out, name)
    if not os.path.exists(os.path.join(run, "link.json")):
        continue
    link = json.load(open(os.path.join(run, "link.json")))
    steps = [json.loads(l) for l in open(os.path.join(run, "metrics.jsonl")) if '"step_time"' in l]
    timed = [s["step_time"] for s in steps[1:]]
    par = json.load(open(os.path.join(run, "results.json")))["parallel"]
    n = len(steps)
    rows.append((link["rate_mbit"], link["hosts"], link["strategy"], link["reduce_dtype"], link["param_dtype"],
                 sum(timed) / len(timed), par["gradient_bytes_reduced_per_rank"] / n / 2**20,
                 par["wait_after_backward_seconds_mean"] / n))
order = {"ddp": 0, "zero1": 1, "zero2": 2, "fsdp": 3}
rows.sort(key=lambda r: (r[0], r[1], order[r[2]], r[3] != "fp32", r[4] != "fp32"))
print("| link | hosts | strategy | reduce | gather | step (s) | vs fp32 | gradient MiB/step | wait after backward (s) |")
print("|---|--:|---|---|---|--:|--:|--:|--:|")
base = {}
for rate, hosts, strategy, reduce, gather, step, mib, wait in rows:
    key = (rate, hosts, strategy)
    if reduce == "fp32" and gather == "fp32":
        base[key] = step
    ratio = "%.2f" % (step / base[key]) if key in base else ""
    print("| %s Mbit/s | %d | %s | %s | %s | %.3f | %s | %.2f | %.3f |" % (rate, hosts, strategy, reduce, gather, step, ratio, mib, wait))
PY
}

run_hosts() {
  local out=${1:-$root/results/scaling_model/measured-bf16}
  [ "$(id -u)" -eq 0 ] || { echo "reduced_precision.sh hosts: the test hosts need root" >&2; exit 1; }
  mkdir -p "$out"
  out=$(cd "$out" && pwd)
  local hosts_sh=$root/tests/cluster/hosts.sh
  # Expanded now: the function's locals are gone when the trap runs at exit.
  trap "bash \"$hosts_sh\" down \"$work/hosts\"; rm -rf \"$work\"" EXIT
  bash "$hosts_sh" up "$work/hosts" 3
  export OMP_NUM_THREADS=1
  "$work/mpibert-prep" split "$root/data_prep/data/squad/dev-v1.1.json.gz" --articles 0:8 --out "$work/train.json" > /dev/null
  "$work/mpibert-prep" --input "$work/train.json" --vocab "$vocab" --out "$work/shards" --split train --log-level warn
  local rate p strategy variant reduce gather name
  for rate in ${RATES:-100 1000}; do
    bash "$hosts_sh" shape "$work/hosts" "${rate}mbit" 0ms
    for p in 2 3; do
      for strategy in ${STRATEGIES:-ddp zero1 zero2 fsdp}; do
        local variants="fp32/fp32 bf16/fp32"
        [ "$strategy" != fsdp ] || variants="$variants bf16/bf16"
        for variant in $variants; do
          reduce=${variant%/*} gather=${variant#*/}
          name=$rate-${p}h-$strategy-$reduce-$gather
          echo "reduced_precision.sh: $name" >&2
          rm -rf "$work/run"
          bash "$hosts_sh" mpirun "$work/hosts" "$p" "$work/mpibert train --model-config $root/configs/small-bert.json" \
            "--vocab $vocab --train-shards $work/shards --output-dir $work/run --strategy $strategy --bucket-mb 25" \
            "--batch-size ${BATCH:-8} --padding full --max-steps $(( ${STEPS:-12} + 1 )) --threads 1 --seed 7" \
            "--logging-steps 1 --save-steps 0 --collective-timeout 300 --reduce-dtype $reduce --param-dtype $gather" \
            > "$work/train.log" 2>&1 || { tail -30 "$work/train.log" >&2; exit 1; }
          mkdir -p "$out/$name"
          cp "$work/run/results.json" "$work/run/metrics.jsonl" "$out/$name/"
          printf '{"rate_mbit": %s, "delay_ms": 0, "hosts": %s, "bucket_mb": 25, "strategy": "%s", "mpi_collectives": "ring", "embedding_exchange": "%s", "reduce_dtype": "%s", "param_dtype": "%s"}\n' \
            "$rate" "$p" "$strategy" "$([ "$strategy" = ddp ] && echo sparse || echo dense)" "$reduce" "$gather" > "$out/$name/link.json"
        done
      done
    done
  done
  table "$out"
}

run_f1() {
  local out=${1:-$root/results/pretrained/reduce-dtype}
  mkdir -p "$out"
  out=$(cd "$out" && pwd)
  trap 'rm -rf "$work"' EXIT
  local model seed dtype run
  model=$(bash "$root/scripts/install-pretrained.sh")
  bash "$root/scripts/sample_shards.sh" "$root/results/main" > /dev/null  # the pretrained job's sample
  local runs=${RUNS:-} pair
  if [ -z "$runs" ]; then
    for seed in ${SEEDS:-42 43 44}; do for dtype in ${DTYPES:-fp32 bf16}; do runs="$runs $dtype:$seed"; done; done
  fi
  for pair in $runs; do
    dtype=${pair%:*} seed=${pair#*:}
    run=$out/mpibert-minilm-$dtype-seed$seed
    echo "reduced_precision.sh: $(basename "$run")" >&2
    rm -rf "$run"
    mpirun -n 2 --bind-to none "$work/mpibert" train --config "$root/configs/pretrained_minilm.toml" \
      --model "$model" --vocab "$model/vocab.txt" --train-shards "$root/results/main/shards/train" \
      --eval-shards "$root/results/main/shards/eval" --output-dir "$run" --seed "$seed" --reduce-dtype "$dtype" \
      --save-steps 0 --log-level warn > "$work/train.log" 2>&1 || { tail -30 "$work/train.log" >&2; exit 1; }
    find "$run" -mindepth 1 -maxdepth 1 ! -name results.json ! -name metrics.jsonl ! -name train_config.toml \
      ! -name predictions.json -exec rm -rf {} +
  done
  python3 - "$out" <<'PY'
import json, os, statistics, sys
out = sys.argv[1]
by = {}
print("| run | EM | F1 | train loss | steps/s |")
print("|---|--:|--:|--:|--:|")
for name in sorted(os.listdir(out)):
    r = json.load(open(os.path.join(out, name, "results.json")))
    by.setdefault(name.split("-")[2], []).append(r["eval_f1"])
    print("| %s | %.2f | %.2f | %.4f | %.3f |" % (name, r["eval_exact_match"], r["eval_f1"], r["train_loss"], r["train_steps_per_second"]))
print()
for dtype, f1 in sorted(by.items()):
    print("- %s reduction over %d seeds: F1 %.2f (sd %.2f)" % (dtype, len(f1), statistics.mean(f1), statistics.stdev(f1) if len(f1) > 1 else 0))
PY
}

case "$mode" in
  hosts) run_hosts "${2:-}" ;;
  f1) run_f1 "${2:-}" ;;
  *) sed -n '2,5p' "$0" >&2; exit 2 ;;
esac
