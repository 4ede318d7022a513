#!/usr/bin/env bash
# mpibert's own ring (--mpi-collectives ring) against Open MPI's algorithms, side by side, on the
# test hosts (tests/cluster/hosts.sh: network namespaces, one rank each, TCP only):
#   sudo bash bench/mpi_algorithms.sh [OUT]     # default OUT results/mpi_algorithms
# For each link rate of RATES (Mbit/s, default "100 1000"), 2 and 3 hosts, and each variant:
#   ring            mpibert's ring (mpi_ring.cpp), the default
#   openmpi         Open MPI 4.1's tuned choice (its fixed decision rules)
#   openmpi-ring    coll_tuned's own ring: all-reduce 4, all-gather 4, reduce-scatter 3 (ring)
#   openmpi-segring as openmpi-ring with the segmented ring all-reduce (5; 1 MiB segments)
# bench_allreduce runs all-reduce, reduce-scatter and all-gather of 256 KiB to 16 MiB (the sizes
# of gradient buckets), float32, one variant after the other at each rate and host count. Writes
# OUT/<rate>-<p>r-<variant>.txt and prints a Markdown table of busbw per op and size with each
# variant's time against the ring's. Needs root and a build; about 15 min on 2 cores, idle.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$root/scripts/env.sh"
export OMP_NUM_THREADS=1
bin=${MPIBERT_BIN_DIR:-$root/build/bin}
out=${1:-$root/results/mpi_algorithms}
[ "$(id -u)" -eq 0 ] || { echo "mpi_algorithms.sh: the test hosts need root" >&2; exit 1; }
[ -x "$bin/bench_allreduce" ] || { echo "mpi_algorithms.sh: $bin/bench_allreduce not built (bash scripts/build.sh)" >&2; exit 1; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/mpibert-algorithms.XXXXXX")
hosts_sh=$root/tests/cluster/hosts.sh
trap 'bash "$hosts_sh" down "$work/hosts"; rm -rf "$work"' EXIT
cp -p "$bin/bench_allreduce" "$work/"
bash "$hosts_sh" up "$work/hosts" 3

dynamic="--mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_allgather_algorithm 4 --mca coll_tuned_reduce_scatter_algorithm 3"
variant_args() {  # VARIANT -> "bench_allreduce flags|mpirun flags"
  case "$1" in
    ring) echo "--mpi-collectives ring|" ;;
    openmpi) echo "--mpi-collectives openmpi|" ;;
    openmpi-ring) echo "--mpi-collectives openmpi|$dynamic --mca coll_tuned_allreduce_algorithm 4" ;;
    openmpi-segring) echo "--mpi-collectives openmpi|$dynamic --mca coll_tuned_allreduce_algorithm 5 --mca coll_tuned_allreduce_algorithm_segmentsize 1048576" ;;
  esac
}

for rate in ${RATES:-100 1000}; do
  bash "$hosts_sh" shape "$work/hosts" "${rate}mbit" 0ms
  iters=$([ "$rate" = 100 ] && echo 4 || echo 10)
  for p in 2 3; do
    for variant in ${VARIANTS:-ring openmpi openmpi-ring openmpi-segring}; do
      IFS='|' read -r flags mca <<< "$(variant_args "$variant")"
      echo "mpi_algorithms.sh: $rate Mbit/s, $p hosts, $variant" >&2
      HOSTS_MPIRUN_ARGS="$mca" bash "$hosts_sh" mpirun "$work/hosts" "$p" \
        "$work/bench_allreduce --op all --min-bytes 256K --max-bytes 16M --factor 4 --warmup 2 --iters $iters $flags" \
        > "$work/bench.out" 2> "$work/bench.log" || { cat "$work/bench.log" >&2; exit 1; }
      { echo "# mpirun $mca"; sed -n '/^# mpibert bench_allreduce/,$p' "$work/bench.out"; } > "$out/$rate-${p}r-$variant.txt"
    done
  done
done

python3 - "$out" <<'PY'
import glob, os, re, sys
out = sys.argv[1]
runs = {}
for path in glob.glob(os.path.join(out, "*-*r-*.txt")):
    rate, p, variant = re.match(r"(\d+)-(\d)r-(.+)\.txt", os.path.basename(path)).groups()
    op = None
    for line in open(path):
        if line.startswith("# ") and line[2:].strip() in ("all_reduce", "reduce_scatter", "all_gather"):
            op = line[2:].strip()
        fields = line.split()
        if op and len(fields) == 7 and fields[0].isdigit():
            if int(fields[6]) != 0:
                sys.exit("%s: %s %s B: %s wrong elements" % (path, op, fields[0], fields[6]))
            runs[(int(rate), int(p), op, int(fields[0]), variant)] = float(fields[3])
variants = ["ring", "openmpi", "openmpi-ring", "openmpi-segring"]
print("Time per operation (ms) and, in brackets, against mpibert's ring (>1: slower).\n")
print("| link | hosts | op | size | " + " | ".join(variants) + " |")
print("|---|--:|---|--:|" + "--:|" * len(variants))
for key in sorted({k[:4] for k in runs}):
    rate, p, op, size = key
    ring = runs.get(key + ("ring",))
    cells = []
    for v in variants:
        t = runs.get(key + (v,))
        cells.append("" if t is None else "%.1f" % (t / 1e3) + ("" if v == "ring" or not ring else " (%.2f)" % (t / ring)))
    print("| %d Mbit/s | %d | %s | %d KiB | %s |" % (rate, p, op, size // 1024, " | ".join(cells)))
PY
