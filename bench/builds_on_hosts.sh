#!/usr/bin/env bash
# Two builds of mpibert side by side on 2 test hosts (tests/cluster/hosts.sh: network namespaces,
# TCP between them, one rank per host): every strategy, ROUNDS rounds, the builds alternating
# (which goes first swaps every round), each run's steady samples/s (after the warm-up steps) and
# mean step time from its results.json, with the step split into the model's part (forward +
# backward) and the parallel layer's (gradient exchange + optimizer). For a change that must not
# slow the step down (the parallel layer's rebuild). Prints a Markdown table of the runs and one of
# the means with the paired rounds' differences; needs root.
#   bench/builds_on_hosts.sh BEFORE_BIN_DIR AFTER_BIN_DIR [ROUNDS] [STEPS] [RATE]
# RATE (e.g. 1gbit) shapes both hosts' links; default unlimited.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
before=${1:?usage: bench/builds_on_hosts.sh BEFORE_BIN_DIR AFTER_BIN_DIR [ROUNDS] [STEPS] [RATE]}
after=${2:?usage: bench/builds_on_hosts.sh BEFORE_BIN_DIR AFTER_BIN_DIR [ROUNDS] [STEPS] [RATE]}
rounds=${3:-2} steps=${4:-30} rate=${5:-}
[ "$(id -u)" -eq 0 ] || { echo "builds_on_hosts: the test hosts need root" >&2; exit 1; }
export OMP_NUM_THREADS=1
work=$(mktemp -d)
trap 'bash tests/cluster/hosts.sh down "$work/hosts" > /dev/null 2>&1 || true; rm -rf "$work"' EXIT
bash tests/cluster/hosts.sh up "$work/hosts" 2
[ -z "$rate" ] || bash tests/cluster/hosts.sh shape "$work/hosts" "$rate" 0
vocab=data_prep/data/bert-base-uncased/vocab.txt
"$after/mpibert-prep" split data_prep/data/squad/dev-v1.1.json.gz --articles 0:10 --out "$work/train.json" > /dev/null
"$after/mpibert-prep" --input "$work/train.json" --vocab "$vocab" --out "$work/shards" --split train --log-level warn

run() {  # BIN STRATEGY OUT: samples/s, step time (steady), and per step over the whole run the
         # model's time (forward + backward) and the parallel layer's (gradient exchange + optimizer)
  local bin=$1 strategy=$2 out=$3
  bash tests/cluster/hosts.sh mpirun "$work/hosts" 2 \
    "$bin/mpibert train --model-config $PWD/configs/small-bert.json --vocab $PWD/$vocab --train-shards $work/shards" \
    "--output-dir $out --strategy $strategy --batch-size 8 --threads 1 --seed 7 --logging-steps 0 --report-to none" \
    "--save-strategy no --max-steps $steps" > "$out.log" 2>&1 || { tail -20 "$out.log" >&2; exit 1; }
  python3 -c "import json; r = json.load(open('$out/results.json')); p = r['phase_seconds']; n = r['global_step']; \
print(f\"{r['train_steady_samples_per_second']:.1f} {1000 * r['parameters']['batch_size'] * 2 / r['train_steady_samples_per_second']:.0f}\", \
f\"{1000 * (p['forward'] + p['backward']) / n:.0f} {1000 * (p['gradient_sync'] + p['optimizer']) / n:.0f}\")"
}

rows=$work/rows
echo "| strategy | round | before samples/s | after samples/s | before ms/step | after ms/step | before model ms | after model ms | before exchange+optimizer ms | after exchange+optimizer ms |"
echo "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|"
for strategy in ddp zero1 zero2 fsdp; do
  for round in $(seq 1 "$rounds"); do
    if [ $((round % 2)) = 1 ]; then order="before after"; else order="after before"; fi
    declare -A result=()
    for build in $order; do
      bin=$before
      [ "$build" = after ] && bin=$after
      result[$build]=$(run "$bin" "$strategy" "$work/$build-$strategy-$round")
    done
    read -r bs bt bm bx <<< "${result[before]}"
    read -r as at am ax <<< "${result[after]}"
    echo "| $strategy | $round | $bs | $as | $bt | $at | $bm | $am | $bx | $ax |"
    echo "$strategy $bs $as $bm $am $bx $ax" >> "$rows"
  done
done
# Per strategy: the means, and the paired rounds' differences (after - before) with their spread.
python3 - "$rows" <<'PY'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
print("\n| strategy | rounds | samples/s before → after | paired difference, mean ± sd | model ms before → after | exchange+optimizer ms before → after |")
print("|---|--:|--:|--:|--:|--:|")
for strategy in dict.fromkeys(r[0] for r in rows):
    v = [[float(x) for x in r[1:]] for r in rows if r[0] == strategy]
    col = lambda i: [x[i] for x in v]
    diff = [a - b for b, a in zip(col(0), col(1))]
    sd = statistics.stdev(diff) if len(diff) > 1 else 0.0
    mean = statistics.mean
    print(f"| {strategy} | {len(v)} | {mean(col(0)):.1f} → {mean(col(1)):.1f} | {mean(diff):+.1f} ± {sd:.1f} |"
          f" {mean(col(2)):.0f} → {mean(col(3)):.0f} | {mean(col(4)):.0f} → {mean(col(5)):.0f} |")
PY
