#!/usr/bin/env bash
# Data-parallel training throughput of `mpibert train`: one rank with 2 LibTorch threads against
# two ranks with 1 thread each (ddp and zero1), on the small config and on bert-base, and prints a
# Markdown table with the samples/s, the speedup over one 2-thread rank, and the gradient
# communication figures each run writes to OUTPUT/results.json ("parallel").
#   bench/parallel_throughput.sh            # defaults finish in about 10 minutes on 2 cores
#   MODELS=small REPEATS=3 bench/parallel_throughput.sh
# Run after scripts/build.sh. Settings (environment):
#   MODELS       "small base"   which models (small: configs/small-bert.json; base: bench/bert-base-config.json)
#   STEPS        20             timed steps of the small config, after WARMUP untimed ones
#   WARMUP       2              steps left out of the rate (first allocations, first collectives)
#   BATCH        32             small config: samples per rank per step
#   BASE_STEPS   3              bert-base: timed steps (it does ~0.3 samples/s on 2 cores)
#   BASE_WARMUP  1
#   BASE_BATCH   4
#   STRATEGIES   "ddp zero1"    strategies of the 2-rank full-padding rows
#   ONE_THREAD   small          models that also get a 1 rank x 1 thread row: twice its rate is what
#                                2 ranks x 1 thread would reach with no communication or imbalance cost
#   DYNAMIC      1              also a dynamic-padding + --group-by-length pair (1 and 2 ranks), small config only
#   TRAIN_ARGS   ""             more `mpibert train` flags for every run, e.g. "--bucket-mb 4"
#   REPEATS      1              runs of every row; the table then shows the median and the min-max
#   BIND         core           mpirun --bind-to (see below)
#   SHARDS       WORK/shards/train: copied from results/main/shards/train (scripts/main_job.sh), or made here
#   WORK         build/bench-parallel   shards, run directories, a copy of the binary
#   MPIBERT      build/bin/mpibert      copied into WORK first, so a rebuild during the benchmark
#                                        cannot mix two versions
#   IDLE_WAIT    0              on a shared machine: before each run, wait up to this many seconds
#                                for the other processes to use less than IDLE_MAX cores (0.3)
#   RETRIES      0              ... and run again, up to this many times, a run during which they
#                                took more than IDLE_MAX cores (the table shows the last attempt)
# The last table column, "others' CPU", is the CPU time other processes took during the run (cores,
# from /proc/stat minus the run's own user+sys time): above ~0.2 the run was slowed by someone else's.
#
# Full padding (every sequence 384 tokens) is the comparison: every rank does the same work each
# step, so the figures measure the parallelism rather than the load imbalance between ranks that
# dynamic padding adds (the step waits for the rank with the longest batch). The dynamic row shows
# what that costs; over few steps its rate also depends on which batches were drawn.
#
# Rates: samples/s = ranks x batch / mean step time over the steps after WARMUP, the step times
# taken from the run's TensorBoard events (train/step_time: data, forward, backward, gradient sync,
# optimizer and the per-step loss all-reduce). results.json's train_samples_per_second counts model
# setup and the first steps, so it is not used. The per-step communication figures are results.json's
# totals (mean over ranks) divided by all steps, warmup included.
#
# Binding: --bind-to core (Open MPI's default for 2 ranks: one core each). Each rank runs its
# compute thread plus the communicator's worker thread, which sleeps until every rank has reached a
# bucket's all-reduce and then polls MPI (yielding) until it completes. Measured on the small config,
# full padding, ddp, 2x1, 12 steps, 4 alternating pairs on an otherwise idle machine: core 20.5, 19.3,
# 23.1, 25.7 samples/s, none 24.2, 19.7, 20.2, 19.6; the gradient transfer took 7-10 ms/step bound
# against 13-29 ms unbound in every pair, and the wait after backward was lower too. Likely: unbound, the
# scheduler moves the polling worker onto the other rank's core, where it competes with that
# rank's backward; bound, it only takes turns with its own rank's compute thread, which is waiting
# for that very transfer. The difference in samples/s is within the run-to-run spread (~15%) here.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh

MODELS=${MODELS:-small base}
STEPS=${STEPS:-20} WARMUP=${WARMUP:-2} BATCH=${BATCH:-32}
BASE_STEPS=${BASE_STEPS:-3} BASE_WARMUP=${BASE_WARMUP:-1} BASE_BATCH=${BASE_BATCH:-4}
STRATEGIES=${STRATEGIES:-ddp zero1}
DYNAMIC=${DYNAMIC:-1}
ONE_THREAD=${ONE_THREAD-small}
TRAIN_ARGS=${TRAIN_ARGS:-}
REPEATS=${REPEATS:-1}
BIND=${BIND:-core}
IDLE_WAIT=${IDLE_WAIT:-0} IDLE_MAX=${IDLE_MAX:-0.3} RETRIES=${RETRIES:-0}
WORK=${WORK:-build/bench-parallel}
MPIBERT=${MPIBERT:-build/bin/mpibert}
VOCAB=data_prep/data/bert-base-uncased/vocab.txt
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3

mkdir -p "$WORK/bin"
cp -p "$MPIBERT" "$WORK/bin/mpibert"
bin="$WORK/bin/mpibert"

# The training shards: a copy of main_job.sh's (which a new main job deletes first), or the same
# split (the first 40 articles of the bundled dev set) prepared here.
if [ -z "${SHARDS:-}" ]; then
  SHARDS="$WORK/shards/train"
  if [ ! -f "$SHARDS/manifest.json" ]; then
    rm -rf "$SHARDS"
    mkdir -p "$WORK/shards"
    if [ -f results/main/shards/train/manifest.json ]; then
      cp -r results/main/shards/train "$SHARDS"
    else
      mkdir -p "$WORK/data"
      build/bin/mpibert-prep split data_prep/data/squad/dev-v1.1.json.gz --articles 0:-8 --out "$WORK/data/train.json"
      RANKS=2 jobs/prep_squad.sh "$WORK/data/train.json" "$SHARDS" train --log-level warn
    fi
  fi
fi

busy_jiffies() { awk '/^cpu /{print $2 + $3 + $4 + $7 + $8 + $9}' /proc/stat; }
wait_for_idle() {  # until the CPU use over 2 s is below IDLE_MAX cores, at most IDLE_WAIT seconds
  local deadline=$((SECONDS + IDLE_WAIT)) before after
  while ((SECONDS < deadline)); do
    before=$(busy_jiffies); sleep 2; after=$(busy_jiffies)
    awk -v b="$before" -v a="$after" -v hz="$(getconf CLK_TCK)" -v max="$IDLE_MAX" \
      'BEGIN { exit !((a - b) / hz / 2 < max) }' && return 0
  done
}

runs="$WORK/runs"
rm -rf "$runs"
mkdir -p "$runs"
index=0

# run MODEL CONFIG BATCH TOTAL_STEPS WARMUP RANKS THREADS STRATEGY PADDING_LABEL [extra train flags]
run() {
  local model=$1 config=$2 batch=$3 steps=$4 warmup=$5 ranks=$6 threads=$7 strategy=$8 padding=$9
  shift 9
  local rep attempt busy_before busy_after others
  for ((rep = 1; rep <= REPEATS; ++rep)); do
    index=$((index + 1))
    local out="$runs/$(printf %03d $index)"
    local cmd=("$bin" train --model-config "$config" --vocab "$VOCAB" --train-shards "$SHARDS" --output-dir "$out"
               --max-steps "$steps" --batch-size "$batch" --threads "$threads" --logging-steps 0 --log-level warn "$@" $TRAIN_ARGS)
    [ "$ranks" -gt 1 ] && cmd=(mpirun -n "$ranks" --bind-to "$BIND" "${cmd[@]}" --strategy "$strategy")
    for ((attempt = 0; ; ++attempt)); do
      wait_for_idle
      echo "[$(date +%T)] $model ${ranks}x$threads $strategy $padding (run $rep/$REPEATS): ${cmd[*]}" >&2
      rm -rf "$out"
      busy_before=$(busy_jiffies)
      /usr/bin/time -f "%e %U %S" -o "$out.time" "${cmd[@]}" > "$out.log" 2>&1 || { cat "$out.log" >&2; exit 1; }
      busy_after=$(busy_jiffies)
      rm -rf "$out"/checkpoint-*  # bert-base checkpoints are 1.3 GB
      others=$(awk -v b="$busy_before" -v a="$busy_after" -v hz="$(getconf CLK_TCK)" \
        '{ o = ((a - b) / hz - $2 - $3) / $1; printf "%.2f", o < 0 ? 0 : o }' "$out.time")
      awk -v o="$others" -v max="$IDLE_MAX" 'BEGIN { exit !(o <= max) }' && break
      ((attempt < RETRIES)) || break
      echo "  other processes took $others cores during that run: once more" >&2
    done
    printf '{"model": "%s", "ranks": %d, "threads": %d, "strategy": "%s", "padding": "%s", "batch": %d, "warmup": %d, "others_cpu": %s}\n' \
      "$model" "$ranks" "$threads" "$strategy" "$padding" "$batch" "$warmup" "$others" > "$out/bench.json"
  done
}

for model in $MODELS; do
  case $model in
    small) config=configs/small-bert.json batch=$BATCH steps=$((STEPS + WARMUP)) warmup=$WARMUP ;;
    base) config=bench/bert-base-config.json batch=$BASE_BATCH steps=$((BASE_STEPS + BASE_WARMUP)) warmup=$BASE_WARMUP ;;
    *) echo "unknown model '$model' (small, base)" >&2; exit 2 ;;
  esac
  run "$model" "$config" "$batch" "$steps" "$warmup" 1 2 - full --padding full
  [[ " $ONE_THREAD " == *" $model "* ]] && run "$model" "$config" "$batch" "$steps" "$warmup" 1 1 - full --padding full
  for strategy in $STRATEGIES; do
    run "$model" "$config" "$batch" "$steps" "$warmup" 2 1 "$strategy" full --padding full
  done
  if [ "$model" = small ] && [ "$DYNAMIC" = 1 ]; then
    run "$model" "$config" "$batch" "$steps" "$warmup" 1 2 - dynamic+gbl --padding dynamic --group-by-length
    run "$model" "$config" "$batch" "$steps" "$warmup" 2 1 ddp dynamic+gbl --padding dynamic --group-by-length
  fi
done

echo "binary: $MPIBERT (built $(date -r "$bin" '+%F %T')), git $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src include 2>/dev/null || echo ' + uncommitted changes'); shards: $SHARDS; --bind-to $BIND"
"$PY" - "$runs" <<'EOF'
import glob, json, os, statistics, struct, sys

def varint(b, i):
    result = shift = 0
    while True:
        c = b[i]; i += 1
        result |= (c & 0x7F) << shift; shift += 7
        if c < 0x80: return result, i

def fields(b):  # protobuf wire format: (field number, value) pairs
    i = 0
    while i < len(b):
        key, i = varint(b, i)
        number, wire = key >> 3, key & 7
        if wire == 0: value, i = varint(b, i)
        elif wire == 1: value = b[i:i + 8]; i += 8
        elif wire == 5: value = b[i:i + 4]; i += 4
        elif wire == 2:
            n, i = varint(b, i); value = b[i:i + n]; i += n
        else: raise ValueError(f"wire type {wire}")
        yield number, value

def step_times(run_dir):
    """train/step_time by step from the TFRecord event files (Event.step = 2, Event.summary = 5,
    Summary.value = 1, Value.tag = 1, Value.simple_value = 2)."""
    times = {}
    for path in glob.glob(os.path.join(run_dir, "tensorboard", "events.out.tfevents.*")):
        b = open(path, "rb").read()
        i = 0
        while i + 12 <= len(b):
            n = struct.unpack_from("<Q", b, i)[0]
            event = b[i + 12:i + 12 + n]
            i += 12 + n + 4
            step, summary = 0, None
            for number, value in fields(event):
                if number == 2: step = value
                elif number == 5: summary = value
            if summary is None: continue
            for number, value in fields(summary):
                if number != 1: continue
                tag = scalar = None
                for f, v in fields(value):
                    if f == 1: tag = v.decode()
                    elif f == 2: scalar = struct.unpack("<f", v)[0]
                if tag == "train/step_time": times[step] = scalar
    return times

rows = {}
for run_dir in sorted(d for d in glob.glob(os.path.join(sys.argv[1], "*")) if os.path.isdir(d)):
    meta = json.load(open(os.path.join(run_dir, "bench.json")))
    res = json.load(open(os.path.join(run_dir, "results.json")))
    times = step_times(run_dir)
    steps = res["global_step"]
    timed = [t for s, t in sorted(times.items()) if s > meta["warmup"]]
    par = res["parallel"]
    key = (meta["model"], meta["ranks"], meta["threads"], meta["strategy"], meta["padding"])
    rows.setdefault(key, []).append({
        "rate": meta["ranks"] * meta["batch"] * len(timed) / sum(timed),
        "step_min": min(timed), "step_max": max(timed), "others": meta["others_cpu"],
        "transfer_ms": 1000 * par["gradient_transfer_seconds_mean"] / steps,
        "hidden": 100 * par["hidden_transfer_fraction"],
        "wait_ms": 1000 * par["wait_after_backward_seconds_mean"] / steps,
        "state_mib": par["optimizer_state_bytes_per_rank"] / 2**20,
        "batch": meta["batch"], "timed_steps": len(timed),
        "phases": res["phase_seconds"],
    })

def med(values): return statistics.median(values)
def spread(values, fmt):
    return fmt.format(med(values)) + ("" if len(values) == 1 else " (" + fmt.format(min(values)) + "–" + fmt.format(max(values)) + ")")

print()
print("| model | ranks x threads | strategy | padding | batch/rank | timed steps | samples/s | speedup vs 1x2 | step s min–max | "
      "grad transfer ms/step | hidden behind backward | wait after backward ms/step | optimizer state MiB/rank | others' CPU |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for key, runs in rows.items():
    model, ranks, threads, strategy, padding = key
    base = rows.get((model, 1, 2, "-", padding))
    rates = [r["rate"] for r in runs]
    speedup = f"{med(rates) / med([r['rate'] for r in base]):.2f}x" if base and (ranks, threads) != (1, 2) else ("1.00x" if ranks == 1 and threads == 2 else "–")
    steps_range = f"{min(r['step_min'] for r in runs):.2f}–{max(r['step_max'] for r in runs):.2f}"
    comm = (lambda f, name: spread([r[name] for r in runs], f)) if ranks > 1 else (lambda f, name: "–")
    print(f"| {model} | {ranks}x{threads} | {strategy if ranks > 1 else '–'} | {padding} | {runs[0]['batch']} | {runs[0]['timed_steps']} | "
          f"{spread(rates, '{:.2f}')} | {speedup} | {steps_range} | {comm('{:.0f}', 'transfer_ms')} | "
          f"{comm('{:.0f}%', 'hidden')} | {comm('{:.0f}', 'wait_ms')} | {runs[0]['state_mib']:.1f} | "
          f"{', '.join('%.2f' % r['others'] for r in runs)} |")
EOF
