#!/usr/bin/env bash
# Submits an mpibert job with the site's settings (jobs/site.env, or MPIBERT_SITE=file) turned into
# sbatch options, since #SBATCH lines cannot read variables. Prints the job id.
#
#   jobs/submit.sh JOB [options] [-- arguments for the job]
#
# JOB: prep (jobs/prep.sbatch), or a training job (jobs/train.sbatch):
#   STRATEGY    any row of `mpibert strategies` (ddp, zero1, zero2, fsdp, hsdp): one node, or --nodes N
#   baseline    one rank on one GPU
#   multinode   MULTINODE_NODES nodes (--nodes N), hsdp unless -- --strategy S says otherwise
# options:
#   --nodes N            nodes (default 1; multinode MULTINODE_NODES, 2)
#   --gpus-per-node G    GPUs per node, one rank each (default GPUS_PER_NODE); baseline: always 1
#   --ntasks N           prep: ranks (default PREP_TASKS); training: ranks per node
#                        (default: one per GPU; on DEVICE=cpu TASKS_PER_NODE, 2)
#   --dependency DEP     sbatch --dependency (e.g. afterok:123: train once the prep job succeeded)
#   --sbatch OPTION      any other sbatch option, repeatable (e.g. --sbatch --mem=0)
#   --dry-run            print the sbatch command instead of running it
# arguments after --: prep: TRAIN.json [EVAL.json] [mpibert-prep options]; the training jobs:
#   mpibert train options (they replace the site's defaults, e.g. -- --max-steps 100 --save-steps 50)
#
# Examples:
#   jobs/submit.sh prep -- data/train-v1.1.json data/dev-v1.1.json
#   jobs/submit.sh ddp --dependency afterok:$PREP_ID
#   TIME_LIMIT=12:00:00 jobs/submit.sh multinode --nodes 4
#   jobs/submit.sh zero1 --nodes 2
set -euo pipefail

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//p}' "$0" >&2; exit 2; }
[ $# -ge 1 ] || usage
job=$1
shift
case "$job" in
  -h|--help) usage ;;
esac

dry_run="" dependency="" extra_sbatch=() opt_nodes="" opt_gpus="" opt_ntasks=""
need() { [ $# -ge 2 ] || { echo "submit.sh: $1 needs a value" >&2; exit 2; }; }
while [ $# -gt 0 ]; do
  case "$1" in
    --nodes) need "$@"; opt_nodes=$2; shift 2 ;;
    --nodes=*) opt_nodes=${1#*=}; shift ;;
    --gpus-per-node) need "$@"; opt_gpus=$2; shift 2 ;;
    --gpus-per-node=*) opt_gpus=${1#*=}; shift ;;
    --ntasks) need "$@"; opt_ntasks=$2; shift 2 ;;
    --ntasks=*) opt_ntasks=${1#*=}; shift ;;
    --dependency) need "$@"; dependency=$2; shift 2 ;;
    --dependency=*) dependency=${1#*=}; shift ;;
    --sbatch) need "$@"; extra_sbatch+=("$2"); shift 2 ;;
    --sbatch=*) extra_sbatch+=("${1#*=}"); shift ;;
    --dry-run) dry_run=1; shift ;;
    --) shift; break ;;
    -h|--help) usage ;;
    *) echo "submit.sh: unknown option $1 (mpibert options go after --)" >&2; exit 2 ;;
  esac
done
for v in "$opt_nodes" "$opt_gpus" "$opt_ntasks"; do
  [[ -z "$v" || "$v" =~ ^[1-9][0-9]*$ ]] || { echo "submit.sh: '$v' is not a positive count" >&2; exit 2; }
done

# Options first, so that the site's defaults that depend on them follow (TASKS_PER_NODE from
# GPUS_PER_NODE); exported, so that the job sees the same values.
[ -z "$opt_gpus" ] || export GPUS_PER_NODE=$opt_gpus
[ -z "$opt_nodes" ] || export MULTINODE_NODES=$opt_nodes
if [ -n "$opt_ntasks" ]; then
  if [ "$job" = prep ]; then export PREP_TASKS=$opt_ntasks; else export TASKS_PER_NODE=$opt_ntasks; fi
fi
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
mpibert_load_site
if [ "$job" != prep ]; then
  mpibert_check_training_job "$job" 2>&1 | sed 's/^/submit.sh: /' >&2
  [ "${PIPESTATUS[0]}" -eq 0 ] || exit 2
fi

nodes=${opt_nodes:-1} gpus=0 tasks=$TASKS_PER_NODE cpus=$CPUS_PER_TASK partition=$PARTITION time=$TIME_LIMIT
script=train.sbatch
case "$job" in
  prep) script=prep.sbatch tasks=$PREP_TASKS cpus=$PREP_CPUS_PER_TASK partition=$PREP_PARTITION time=$PREP_TIME_LIMIT ;;
  baseline) tasks=1; [ "$DEVICE" = cpu ] || gpus=1 ;;
  multinode) nodes=$MULTINODE_NODES; [ "$DEVICE" = cpu ] || gpus=$GPUS_PER_NODE ;;
  *) [ "$DEVICE" = cpu ] || gpus=$GPUS_PER_NODE ;;
esac
if [ "$nodes" -gt 1 ] && { [ "$job" = prep ] || [ "$job" = baseline ]; }; then
  echo "submit.sh: the $job job runs on one node" >&2
  exit 2
fi
case "$DEVICE" in cpu|gpu) ;; *) echo "submit.sh: DEVICE=$DEVICE: expected gpu or cpu" >&2; exit 2 ;; esac
if [ "$gpus" -gt 0 ] && [ "$tasks" -gt "$gpus" ]; then
  echo "submit.sh: $tasks ranks per node for $gpus GPUs per node: mpibert runs one rank per GPU" >&2
  exit 2
fi

case "$RESULTS_DIR" in /*) results_dir=$RESULTS_DIR ;; *) results_dir=$PWD/$RESULTS_DIR ;; esac
export MPIBERT_JOB=$job  # which training job train.sbatch runs
sbatch_args=(--parsable --job-name="mpibert-$job" --export=ALL
             --nodes="$nodes" --ntasks-per-node="$tasks" --ntasks="$(( nodes * tasks ))"
             --cpus-per-task="$cpus" --time="$time"
             --output="$results_dir/slurm/%x-%j.out")
[ -z "$partition" ] || sbatch_args+=(--partition="$partition")
[ -z "$ACCOUNT" ] || sbatch_args+=(--account="$ACCOUNT")
[ -z "$QOS" ] || sbatch_args+=(--qos="$QOS")
if [ "$gpus" -gt 0 ]; then
  if [ -n "$GRES" ]; then sbatch_args+=(--gres="$GRES:$gpus"); else sbatch_args+=(--gpus-per-node="$gpus"); fi
fi
[ -z "$dependency" ] || sbatch_args+=(--dependency="$dependency")
# With the mpirun fallback the ranks on the first node are children of mpirun in the batch step,
# which SLURM's step signal (--signal=USR1@120) does not reach: signal the batch shell instead
# (B:), which passes it to mpirun, which passes it to every rank.
if [ "$job" != prep ]; then
  if [ "$LAUNCHER" = mpirun ] ||
     { [ "$LAUNCHER" = auto ] && srun --mpi=list >/dev/null 2>&1 && ! srun --mpi=list 2>&1 | grep -qw "$SRUN_MPI"; }; then
    sbatch_args+=(--signal=B:USR1@120)
  fi
fi
# shellcheck disable=SC2206
sbatch_args+=($SBATCH_EXTRA "${extra_sbatch[@]}")

command=(sbatch "${sbatch_args[@]}" "$MPIBERT_ROOT/jobs/$script" "$@")
if [ -n "$dry_run" ]; then
  echo "# site: $MPIBERT_SITE (DEVICE=$DEVICE); environment passed on: MPIBERT_ROOT=$MPIBERT_ROOT MPIBERT_SITE=$MPIBERT_SITE MPIBERT_JOB=$job"
  mpibert__quote "${command[@]}"
  exit 0
fi
mkdir -p "$results_dir/slurm"  # SLURM does not create the output file's directory
command -v sbatch >/dev/null || { echo "submit.sh: sbatch not found (no SLURM here? jobs/local.sh runs without it)" >&2; exit 1; }
out=$("${command[@]}") || { echo "submit.sh: sbatch failed: $(mpibert__quote "${command[@]}")" >&2; exit 1; }
job_id=${out%%;*}
echo "submit.sh: submitted mpibert-$job as job $job_id (output $results_dir/slurm/mpibert-$job-$job_id.out)" >&2
echo "$job_id"
