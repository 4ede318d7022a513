#!/usr/bin/env bash
# Collective bandwidth (nccl-tests style) of the communicator backends with 2 ranks:
#   bench/allreduce.sh [bench_allreduce options]   e.g. --backend nccl --op all --max-bytes 1G
# Defaults: MPI backend, all three operations. Run after scripts/build.sh.
# --bind-to none: each rank runs two busy threads (the caller and the communicator's worker that
# polls MPI, or NCCL's proxy thread); Open MPI's default for 2 ranks, one core per rank, would put
# both on the same core and time their contention instead of the transfer.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
ranks=${RANKS:-2}
args=("$@")
[[ " $* " == *" --op"* ]] || args+=(--op all)
mpirun -n "$ranks" --bind-to "${BIND:-none}" build/bin/bench_allreduce "${args[@]}"
