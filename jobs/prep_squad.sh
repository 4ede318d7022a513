#!/usr/bin/env bash
# Prepares SQuAD features as HDF5 shards with one MPI rank per shard.
#   jobs/prep_squad.sh INPUT.json[.gz] OUT_DIR [train|eval] [extra mpibert-prep options]
# Inside a SLURM allocation the ranks come from srun (one per task); elsewhere from
# `mpirun -n $RANKS` (default 2).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
source "$root/scripts/env.sh"
input=$1 out=$2 split=${3:-train}
shift $(( $# < 3 ? $# : 3 ))
vocab=${VOCAB:-$root/data_prep/data/bert-base-uncased/vocab.txt}
prep=("$root/build/bin/mpibert-prep" --input "$input" --vocab "$vocab" --out "$out" --split "$split" "$@")
if [ -n "${SLURM_JOB_ID:-}" ]; then
  srun "${prep[@]}"  # the cluster's MpiDefault picks the PMI flavour
else
  mpirun -n "${RANKS:-2}" --bind-to none "${prep[@]}"
fi
