#!/usr/bin/env bash
# The measurements the scaling model is checked against (results/scaling_model/check.md):
# mpibert's small BERT trained across 2 and 3 test hosts (network namespaces, one rank each, TCP
# only; tests/cluster/hosts.sh) at three link rates (hosts.sh shape: 100 Mbit/s,
# 1 Gbit/s, unlimited), with two bucket sizes (1 and 25 MiB) for ddp and 25 MiB for zero1, and at
# 1 Gbit/s also zero2 and fsdp (25 MiB; fsdp's groups are the model's units); and bench_allreduce
# over the same links, from which the model fits alpha and beta.
#   sudo bash tools/measure_scaling.sh [OUT_DIR]    # default results/scaling_model/measured
# Writes OUT_DIR/<rate>-<p>h-<strategy>-<bucket>mb/{results.json,metrics.jsonl,link.json} and
# OUT_DIR/allreduce-<rate>-<p>r.txt. Needs root and a build (bash scripts/build.sh); about 15 min
# on 2 cores. Run it on an idle machine: 3 ranks already share 2 cores.
# Environment: STEPS (timed steps per run, default 12), BATCH (per rank, default 8), RATES (the link
# rates to measure, default "100 1000 unlimited"; the others' files are left as they are),
# COLLECTIVES (the MPI backend's algorithm, --mpi-collectives: ring, the default, or openmpi; the
# runs before the ring were measured with openmpi), EMBEDDING (ddp's --embedding-exchange: sparse,
# the default, or dense, as before it), STRATEGIES (which of ddp zero1 zero2 fsdp to run, default
# all) and ALLREDUCE (0: skip bench_allreduce).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$root/scripts/env.sh"
export OMP_NUM_THREADS=1
bin=${MPIBERT_BIN_DIR:-$root/build/bin}
out=$(mkdir -p "${1:-$root/results/scaling_model/measured}" && cd "${1:-$root/results/scaling_model/measured}" && pwd)
steps=${STEPS:-12}
batch=${BATCH:-8}
collectives=${COLLECTIVES:-ring}
embedding=${EMBEDDING:-sparse}
strategies=${STRATEGIES:-ddp zero1 zero2 fsdp}
[ "$(id -u)" -eq 0 ] || { echo "measure_scaling.sh: the test hosts need root" >&2; exit 1; }
for f in mpibert mpibert-prep bench_allreduce; do
  [ -x "$bin/$f" ] || { echo "measure_scaling.sh: $bin/$f not built (bash scripts/build.sh)" >&2; exit 1; }
done

work=$(mktemp -d "${TMPDIR:-/tmp}/mpibert-measure.XXXXXX")
hosts_sh=$root/tests/cluster/hosts.sh
trap 'bash "$hosts_sh" down "$work/hosts"; rm -rf "$work"' EXIT
bash "$hosts_sh" up "$work/hosts" 3

vocab=$root/data_prep/data/bert-base-uncased/vocab.txt
"$bin/mpibert-prep" split "$root/data_prep/data/squad/dev-v1.1.json.gz" --articles 0:8 --out "$work/train.json" > /dev/null
"$bin/mpibert-prep" --input "$work/train.json" --vocab "$vocab" --out "$work/shards" --split train --log-level warn

link_json() {  # RATE_MBIT|null HOSTS BUCKET STRATEGY COLLECTIVES EMBEDDING
  printf '{"rate_mbit": %s, "delay_ms": 0, "hosts": %s, "bucket_mb": %s, "strategy": "%s", "mpi_collectives": "%s", "embedding_exchange": "%s"}\n' "$@"
}

strategies_at() {  # RATE -> "STRATEGY BUCKET_MB" lines
  printf '%s\n' "ddp 1" "ddp 25" "zero1 25"
  [ "$1" != 1000 ] || printf '%s\n' "zero2 25" "fsdp 25"
}

for rate in ${RATES:-100 1000 unlimited}; do
  case "$rate" in 100|1000|unlimited) ;; *) echo "measure_scaling.sh: RATES: $rate is not 100, 1000 or unlimited" >&2; exit 1 ;; esac
  if [ "$rate" = unlimited ]; then
    bash "$hosts_sh" unshape "$work/hosts"
  else
    bash "$hosts_sh" shape "$work/hosts" "${rate}mbit" 0ms
  fi
  for p in 2 3; do
    # Up to 8 MiB: past the small model's buckets (1 MiB, then 15.7 MiB) the bytes term is fitted;
    # few iterations, as 100 Mbit/s makes a large one take seconds.
    if [ "${ALLREDUCE:-1}" != 0 ]; then
      echo "measure_scaling.sh: bench_allreduce, $p hosts, $rate Mbit/s"
      bash "$hosts_sh" mpirun "$work/hosts" "$p" "$bin/bench_allreduce --op all --min-bytes 1K --max-bytes 16M --mpi-collectives $collectives" \
        "--factor 4 --warmup 2 --iters 5" > "$work/bench.out" 2> "$work/bench.log" ||
        { cat "$work/bench.log" >&2; exit 1; }
      sed -n '/^# mpibert bench_allreduce/,$p' "$work/bench.out" > "$out/allreduce-$rate-${p}r.txt"  # not mpirun's map
    fi
    mapfile -t specs < <(strategies_at "$rate")
    for spec in "${specs[@]}"; do
      read -r strategy bucket <<< "$spec"
      [[ " $strategies " == *" $strategy "* ]] || continue
      name=$rate-${p}h-$strategy-${bucket}mb
      echo "measure_scaling.sh: $name"
      rm -rf "$work/run"
      bash "$hosts_sh" mpirun "$work/hosts" "$p" "$bin/mpibert train --model-config $root/configs/small-bert.json" \
        "--vocab $vocab --train-shards $work/shards --output-dir $work/run --strategy $strategy --bucket-mb $bucket" \
        "--batch-size $batch --padding full --max-steps $steps --threads 1 --seed 7 --logging-steps 1 --save-steps 0" \
        "--collective-timeout 300 --mpi-collectives $collectives --embedding-exchange $embedding" > "$work/train.log" 2>&1 || { tail -30 "$work/train.log" >&2; exit 1; }
      mkdir -p "$out/$name"
      cp "$work/run/results.json" "$work/run/metrics.jsonl" "$out/$name/"
      link_json "$([ "$rate" = unlimited ] && echo null || echo "$rate")" "$p" "$bucket" "$strategy" "$collectives" \
        "$([ "$strategy" = ddp ] && echo "$embedding" || echo dense)" > "$out/$name/link.json"
    done
  done
done
echo "measure_scaling.sh: runs and benchmarks in $out; next: tools/scaling-model all"
