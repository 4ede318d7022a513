#!/usr/bin/env bash
# The SLURM jobs' runs on a workstation without SLURM: `mpirun -n RANKS --bind-to none`, the same
# run directory layout ($RESULTS_DIR/JOB-STRATEGY-RANKSr-local-DATE, or $RESULTS_DIR/$RUN_NAME),
# job.log and job.json, and the same site settings (jobs/site.env, MPIBERT_SITE).
#
#   jobs/local.sh [baseline|ddp|zero1|zero2|fsdp] [mpibert train options...]
#
# baseline: 1 rank; ddp, zero1, zero2 and fsdp: RANKS ranks (default TASKS_PER_NODE: GPUS_PER_NODE on
# DEVICE=gpu, 2 on DEVICE=cpu). Options replace the site's defaults (e.g. --max-steps 100).
# Interrupted by SIGTERM/SIGUSR1 (kill -USR1 PID of this script), mpibert checkpoints and exits 75;
# run the same command again with RUN_NAME=<the run directory's name> to resume (--resume auto).
#   DEVICE=cpu jobs/local.sh ddp --max-steps 50
#   DEVICE=cpu RUN_NAME=ddp-ddp-2r-local-20250101-120000 jobs/local.sh ddp --max-steps 50
set -euo pipefail
job=ddp
case "${1:-}" in
  baseline|ddp|zero1|zero2|fsdp) job=$1; shift ;;
  -h|--help) sed -n '2,13s/^# \{0,1\}//p' "$0"; exit 0 ;;
esac
export MPIBERT_LOCAL=1
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
mpibert_setup
if [ "$job" = baseline ]; then RANKS=1; else RANKS=${RANKS:-$TASKS_PER_NODE}; fi
MPIBERT_RESUME_HINT=$(mpibert__quote "$0" "$job" "$@")
if [ "$job" = baseline ]; then strategy=ddp; else strategy=$job; fi
MPIBERT_JOB_ID=local-$(date +%Y%m%d-%H%M%S)
mpibert_train_job "$job" "$strategy" "$@"
