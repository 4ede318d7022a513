#!/usr/bin/env bash
# The SLURM jobs' runs on a workstation without SLURM: `mpirun -n RANKS --bind-to none`, the same
# run directory layout ($RESULTS_DIR/JOB-STRATEGY-RANKSr-local-DATE, or $RESULTS_DIR/$RUN_NAME),
# job.log and job.json, and the same site settings (jobs/site.env, MPIBERT_SITE).
#
#   jobs/local.sh [baseline|STRATEGY] [mpibert train options...]
#
# STRATEGY: a row of `mpibert strategies` (default ddp), on RANKS ranks (default TASKS_PER_NODE:
# GPUS_PER_NODE on DEVICE=gpu, 2 on DEVICE=cpu); baseline: 1 rank. Options replace the site's
# defaults (e.g. --max-steps 100). DEVICE defaults to cpu on a machine without an NVIDIA driver.
# On DEVICE=cpu without shards in TRAIN_SHARDS, the bundled sample is prepared there first (as the
# main job's). Threads per rank: THREADS, else the recipe's (the CPU recipe's 1).
# Interrupted by SIGTERM/SIGUSR1 (kill -USR1 PID of this script), mpibert checkpoints and exits 75;
# run the same command again with RUN_NAME=<the run directory's name> to resume (--resume auto).
#   jobs/local.sh ddp --max-steps 50
#   RUN_NAME=ddp-ddp-2r-local-20250101-120000 jobs/local.sh ddp --max-steps 50
set -euo pipefail
job=ddp
case "${1:-}" in
  -h|--help) sed -n '2,17s/^# \{0,1\}//p' "$0"; exit 0 ;;
  -*|"") ;;
  *) job=$1; shift ;;
esac
export MPIBERT_LOCAL=1
if [ -z "${DEVICE:-}" ] && [ ! -e /proc/driver/nvidia ]; then
  export DEVICE=cpu
  echo "[mpibert-job] no NVIDIA driver here: DEVICE=cpu (the CPU recipe)" >&2
fi
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
mpibert_setup
[ "$job" != multinode ] || mpibert__die "multinode is a SLURM job (jobs/submit.sh multinode); here give a strategy"
mpibert_check_training_job "$job" || exit 2
if [ "$job" = baseline ]; then RANKS=1; else RANKS=${RANKS:-$TASKS_PER_NODE}; fi
if [ "$DEVICE" = cpu ] && [ ! -f "$TRAIN_SHARDS/manifest.json" ] && [ "$TRAIN_SHARDS" = "$SHARDS_DIR/train" ]; then
  echo "[mpibert-job] no shards in $SHARDS_DIR: preparing the bundled sample there (scripts/sample_shards.sh)" >&2
  MPIBERT_BIN_DIR=$MPIBERT_BIN_DIR bash "$MPIBERT_ROOT/scripts/sample_shards.sh" "$RESULTS_DIR/sample-data" "$SHARDS_DIR"
fi
MPIBERT_RESUME_HINT=$(mpibert__quote "$0" "$job" "$@")
if [ "$job" = baseline ]; then strategy=ddp; else strategy=$job; fi
MPIBERT_JOB_ID=local-$(date +%Y%m%d-%H%M%S)
mpibert_train_job "$job" "$strategy" "$@"
