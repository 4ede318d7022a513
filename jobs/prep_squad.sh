#!/usr/bin/env bash
# Prepares SQuAD features as HDF5 shards with one MPI rank per shard.
#   jobs/prep_squad.sh INPUT.json[.gz] OUT_DIR [train|eval] [extra mpibert-prep options]
# Inside a SLURM allocation the ranks are the job's tasks, launched as jobs/lib.sh chooses
# (srun --mpi=pmix, else mpirun); elsewhere `mpirun -n $RANKS --bind-to none` (default 2).
# VOCAB (default: jobs/site.env's, the bundled bert-base-uncased vocab.txt) and MPIBERT_BIN_DIR
# come from the site settings. The prep job (jobs/submit.sh prep) runs the same for train and eval.
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,7s/^# \{0,1\}//p' "$0" >&2; exit 2; }
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
mpibert_setup
input=$1 out=$2 split=${3:-train}
shift $(( $# < 3 ? $# : 3 ))
if [ "$MPIBERT_SCHEDULER" = slurm ]; then ranks=${SLURM_NTASKS:-1}; else ranks=${RANKS:-2}; fi
mpibert_launcher "$ranks"
exec "${LAUNCH[@]}" "$MPIBERT_BIN_DIR/mpibert-prep" --input "$input" --vocab "$VOCAB" --out "$out" --split "$split" "$@"
