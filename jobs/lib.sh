# shellcheck shell=bash
# Shared code of the mpibert jobs (jobs/*.sbatch, jobs/local.sh, jobs/prep_squad.sh); sourced, bash.
#
#   mpibert_load_site                 MPIBERT_ROOT, site settings (jobs/site.env or $MPIBERT_SITE)
#   mpibert_setup                     the same, scripts/env.sh, `module load $MODULES`, SLURM or local
#   mpibert_launcher RANKS            LAUNCH=(srun --mpi=pmix ... | mpirun -n RANKS ...)
#   mpibert_train_job JOB STRATEGY [mpibert train options]
#   mpibert_prep_job [TRAIN_INPUT [EVAL_INPUT]] [mpibert-prep options]
#
# A job's run directory is $RESULTS_DIR/${RUN_NAME:-JOB-STRATEGY-RANKSr-JOBID}: the SLURM job id
# stays the same across requeues, so a requeued job finds its checkpoints (`--resume auto`); one
# requeued onto another number of ranks keeps the directory its first attempt named, and mpibert
# reshards the checkpoint.
# It holds what mpibert writes (results.json, metrics.jsonl, train_config.toml, tensorboard/,
# predictions.json, checkpoint-N/) and, from here, job.log (the job's output, every attempt
# appended, each headed by the job id, nodes, date, git commit and the exact command) and job.json
# (the job and its attempts, rewritten atomically at the start and the end of every attempt).

# Exit status of `mpibert train` when it checkpointed on SIGUSR1/SIGTERM and wants to be requeued.
MPIBERT_EXIT_REQUEUE=75

mpibert__log() { echo "[mpibert-job] $*" >&2; }
mpibert__die() { echo "[mpibert-job] error: $*" >&2; exit 1; }

# --- setup -----------------------------------------------------------------------------------
# The repository and the site settings only (what jobs/submit.sh needs on the login node).
mpibert_load_site() {
  MPIBERT_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  export MPIBERT_ROOT
  local site=${MPIBERT_SITE:-$MPIBERT_ROOT/jobs/site.env}
  [ -f "$site" ] || mpibert__die "site settings $site not found (MPIBERT_SITE)"
  MPIBERT_SITE=$(cd "$(dirname "$site")" && pwd)/$(basename "$site")
  export MPIBERT_SITE
  # shellcheck source=site.env
  source "$MPIBERT_SITE"
  if [ -z "$TASKS_PER_NODE" ]; then
    if [ "$DEVICE" = cpu ]; then TASKS_PER_NODE=2; else TASKS_PER_NODE=$GPUS_PER_NODE; fi
  fi
  # Under SLURM a rank's cores are CPUS_PER_TASK; on a workstation the recipe says (jobs/local.sh).
  [ -n "$THREADS" ] || [ -n "${MPIBERT_LOCAL:-}" ] || THREADS=$CPUS_PER_TASK
}

mpibert_setup() {
  mpibert_load_site
  # Open MPI settings every run here needs (root, oversubscription, shared memory without CMA).
  # shellcheck source=../scripts/env.sh
  source "$MPIBERT_ROOT/scripts/env.sh"
  [ -z "$THREADS" ] || export OMP_NUM_THREADS=$THREADS
  mpibert_load_modules
  if [ -n "${SLURM_JOB_ID:-}" ] && [ -z "${MPIBERT_LOCAL:-}" ]; then MPIBERT_SCHEDULER=slurm; else MPIBERT_SCHEDULER=local; fi
}

mpibert_load_modules() {
  [ -n "$MODULES" ] || return 0
  if ! type module >/dev/null 2>&1; then
    # Batch shells are not login shells: the module function may not be defined yet.
    local init
    for init in /etc/profile.d/lmod.sh /etc/profile.d/modules.sh /usr/share/lmod/lmod/init/bash \
                /usr/share/modules/init/bash; do
      if [ -f "$init" ]; then
        # shellcheck disable=SC1090
        source "$init" || true
        break
      fi
    done
  fi
  if type module >/dev/null 2>&1; then
    local m
    for m in $MODULES; do
      module load "$m" || mpibert__die "module load $m failed"
    done
  else
    mpibert__log "module command not found: not loading $MODULES"
  fi
}

# --- launcher -------------------------------------------------------------------------------
# In SLURM: srun --mpi=$SRUN_MPI when srun has that MPI plugin (every rank a task of the job step,
# signalled by SLURM's --signal), else mpirun inside the allocation (Open MPI reads the allocation).
# Outside SLURM: mpirun -n RANKS.
mpibert_choose_launcher() {
  if [ "$MPIBERT_SCHEDULER" != slurm ]; then echo mpirun; return; fi
  case "$LAUNCHER" in
    srun|mpirun) echo "$LAUNCHER" ;;
    auto)
      if command -v srun >/dev/null && srun --mpi=list 2>&1 | grep -qw "$SRUN_MPI"; then echo srun; else echo mpirun; fi ;;
    *) mpibert__die "LAUNCHER=$LAUNCHER: expected auto, srun or mpirun" ;;
  esac
}

mpibert_launcher() {  # RANKS -> LAUNCH array, MPIBERT_LAUNCHER name
  local ranks=$1
  MPIBERT_LAUNCHER=$(mpibert_choose_launcher)
  if [ "$MPIBERT_LAUNCHER" = srun ]; then
    # --kill-on-bad-exit=0: on preemption every rank exits 75; none may be killed while rank 0
    # finishes the checkpoint. --cpus-per-task: srun no longer inherits it from sbatch (22.05+).
    LAUNCH=(srun "--mpi=$SRUN_MPI" --kill-on-bad-exit=0 "--ntasks=$ranks")
    [ -z "${SLURM_CPUS_PER_TASK:-}" ] || LAUNCH+=("--cpus-per-task=$SLURM_CPUS_PER_TASK")
    # shellcheck disable=SC2206
    LAUNCH+=($SRUN_ARGS)
  else
    # shellcheck disable=SC2206
    LAUNCH=(mpirun -n "$ranks" $MPIRUN_ARGS)
  fi
  # The host's launcher starts the image's programs, one container per rank (the hybrid model).
  # shellcheck disable=SC2206
  LAUNCH+=(${CONTAINER:-})
}

# --- the jobs -------------------------------------------------------------------------------
# The training jobs are the strategies of `mpibert strategies --json` (the table in the program
# is the only list), plus baseline (1 rank) and multinode (the training job on MULTINODE_NODES
# nodes, hsdp unless a strategy is given). Prints them, one a line; dies when mpibert cannot say.
mpibert_strategies() {
  local listed
  # shellcheck disable=SC2086
  listed=$(${CONTAINER:-} "$MPIBERT_BIN_DIR/mpibert" strategies --json 2>/dev/null) ||
    mpibert__die "$MPIBERT_BIN_DIR/mpibert strategies failed: build mpibert first (bash scripts/build.sh; MPIBERT_BIN_DIR)"
  sed -n 's/^ *"name": "\([a-z0-9_]*\)",\{0,1\}$/\1/p' <<< "$listed"
}
# JOB -> 0 when it is a training job (baseline, multinode or a strategy), else the message and 2.
mpibert_check_training_job() {
  local job=$1 strategies
  case "$job" in baseline|multinode) return 0 ;; esac
  strategies=$(mpibert_strategies) || exit 1
  grep -qx -- "$job" <<< "$strategies" && return 0
  echo "unknown job '$job': prep, baseline, multinode or a strategy ($(tr '\n' ' ' <<< "$strategies" | sed 's/ $//; s/ /, /g'): mpibert strategies)" >&2
  return 2
}

# --- small helpers ----------------------------------------------------------------------------
# The job's tasks: nodes x tasks per node where that is uniform (a requeued job given another
# number of nodes is counted from its allocation), else SLURM_NTASKS.
mpibert__slurm_ranks() {
  if [[ "${SLURM_NTASKS_PER_NODE:-}" =~ ^[1-9][0-9]*$ && "${SLURM_JOB_NUM_NODES:-}" =~ ^[1-9][0-9]*$ ]]; then
    echo $(( SLURM_NTASKS_PER_NODE * SLURM_JOB_NUM_NODES ))
  else
    echo "${SLURM_NTASKS:-1}"
  fi
}
mpibert__json_str() {
  local s=$1
  s=${s//\\/\\\\}; s=${s//\"/\\\"}; s=${s//$'\n'/\\n}; s=${s//$'\r'/\\r}; s=${s//$'\t'/\\t}
  printf '"%s"' "$s"
}
mpibert__json_num() { if [[ "${1:-}" =~ ^-?[0-9]+$ ]]; then printf '%s' "$1"; else printf null; fi; }
mpibert__quote() { local out="" a; for a in "$@"; do out+=$(printf '%q ' "$a"); done; echo "${out% }"; }
mpibert__now() { date '+%Y-%m-%dT%H:%M:%S%z'; }
mpibert__scontrol_field() {  # FIELD -> value from `scontrol show job` for this job
  [ "$MPIBERT_SCHEDULER" = slurm ] || return 0
  scontrol show job -o "$SLURM_JOB_ID" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$1=//p" | head -n 1
}
mpibert__git_commit() {
  local commit
  commit=$(git -C "$MPIBERT_ROOT" rev-parse HEAD 2>/dev/null) || { echo unknown; return; }
  if [ -n "$(git -C "$MPIBERT_ROOT" status --porcelain --untracked-files=no 2>/dev/null)" ]; then commit+=" (modified)"; fi
  echo "$commit"
}

# Has the user given option NAME (--name or --name=value) among the arguments?
mpibert__has_opt() { local name=$1 a; shift; for a in "$@"; do [[ "$a" == "$name" || "$a" == "$name="* ]] && return 0; done; return 1; }
mpibert__opt_value() {  # NAME ARGS... -> the value of the last --name
  local name=$1 value="" prev=""
  shift
  for a in "$@"; do
    if [ "$prev" = "$name" ]; then value=$a; fi
    if [[ "$a" == "$name="* ]]; then value=${a#"$name="}; fi
    prev=$a
  done
  echo "$value"
}

# --- the job's identity, run directory, job.log and job.json ---------------------------------
mpibert_identity() {  # JOB RANKS
  MPIBERT_JOB=$1
  MPIBERT_RANKS=$2
  if [ "$MPIBERT_SCHEDULER" = slurm ]; then
    MPIBERT_JOB_ID=$SLURM_JOB_ID
    MPIBERT_JOB_NAME=${SLURM_JOB_NAME:-$1}
    MPIBERT_NODES=${SLURM_JOB_NODELIST:-$(hostname)}
    MPIBERT_NUM_NODES=${SLURM_JOB_NUM_NODES:-1}
    MPIBERT_PARTITION=${SLURM_JOB_PARTITION:-}
    MPIBERT_RESTARTS=${SLURM_RESTART_COUNT:-0}
    MPIBERT_CPUS_PER_TASK=${SLURM_CPUS_PER_TASK:-}
    # GPUs of the job: per node (SLURM_GPUS_ON_NODE, set when GPUs were allocated) x nodes.
    local per_node=${SLURM_GPUS_ON_NODE:-0}
    MPIBERT_GPUS=$(( per_node * MPIBERT_NUM_NODES ))
  else
    MPIBERT_JOB_ID=${MPIBERT_JOB_ID:-local-$(date +%Y%m%d-%H%M%S)}
    MPIBERT_JOB_NAME=mpibert-$1
    MPIBERT_NODES=$(hostname)
    MPIBERT_NUM_NODES=1
    MPIBERT_PARTITION=
    MPIBERT_RESTARTS=0
    MPIBERT_CPUS_PER_TASK=$THREADS
    if [ "$DEVICE" = cpu ]; then MPIBERT_GPUS=0; else MPIBERT_GPUS=$2; fi
  fi
}

mpibert_run_dir() {  # NAME (default run name)
  RUN_DIR=$RESULTS_DIR/${RUN_NAME:-$1}
  if [ -z "${RUN_NAME:-}" ] && [ "$MPIBERT_RESTARTS" -gt 0 ] && [ ! -d "$RUN_DIR" ]; then
    mpibert__earlier_attempt_dir "$1"
  fi
  mkdir -p "$RUN_DIR"
  RUN_DIR=$(cd "$RUN_DIR" && pwd)
}

# A requeued job that now has another number of ranks: the run directory of its earlier attempts
# (the same job id and job, any number of ranks), where its checkpoints are.
mpibert__earlier_attempt_dir() {  # NAME (JOB-STRATEGY-RANKSr-JOBID)
  local pattern d dirs=()
  pattern=$(sed -E 's/-[0-9]+r-([^-]+)$/-[0-9]*r-\1/' <<< "$1")
  for d in "$RESULTS_DIR"/$pattern; do [ -d "$d" ] && dirs+=("$d"); done
  [ ${#dirs[@]} -le 1 ] || mpibert__die "job $MPIBERT_JOB_ID has several run directories (${dirs[*]}): set RUN_NAME"
  if [ ${#dirs[@]} -eq 1 ]; then
    MPIBERT_RUN_DIR_NOTE="requeued on $MPIBERT_RANKS ranks: continuing in ${dirs[0]} (its checkpoints are resharded)"
    RUN_DIR=${dirs[0]}
  fi
}

# GLOBAL_BATCH (site): the per-rank --batch-size that keeps that global batch on RANKS ranks (with
# the job's gradient accumulation: its options, else CONFIG's), so that a job that gets another
# number of nodes, a requeued one included, trains with the same global batch and schedule.
mpibert__batch_for_global() {  # RANKS ARGS...
  local ranks=$1 accumulation config
  shift
  accumulation=$(mpibert__opt_value --gradient-accumulation "$@")
  [ -n "$accumulation" ] || accumulation=$(mpibert__opt_value --gradient_accumulation_steps "$@")
  config=$(mpibert__opt_value --config "$@")
  config=${config:-${CONFIG:-}}
  if [ -z "$accumulation" ] && [ -f "$config" ]; then
    accumulation=$(sed -nE 's/^[[:space:]]*gradient-accumulation[[:space:]]*=[[:space:]]*([0-9]+).*/\1/p' "$config" | tail -n 1)
  fi
  accumulation=${accumulation:-1}
  [[ "$GLOBAL_BATCH" =~ ^[1-9][0-9]*$ ]] || mpibert__die "GLOBAL_BATCH=$GLOBAL_BATCH is not a positive count"
  (( GLOBAL_BATCH % (ranks * accumulation) == 0 )) ||
    mpibert__die "GLOBAL_BATCH=$GLOBAL_BATCH is not a multiple of $ranks ranks x $accumulation accumulation steps"
  echo $(( GLOBAL_BATCH / (ranks * accumulation) ))
}

# From here on the job's output also goes to RUN_DIR/job.log (appended: one section per attempt).
mpibert_log_begin() {  # "COMMAND" (as a shell would read it)
  MPIBERT_ATTEMPT_START=$(mpibert__now)
  MPIBERT_COMMAND=$1
  exec {MPIBERT_STDOUT}>&1 {MPIBERT_STDERR}>&2
  exec > >(exec tee -a "$RUN_DIR/job.log") 2>&1
  MPIBERT_TEE_PID=$!
  local attempt=$(( MPIBERT_RESTARTS + 1 ))
  echo "==== mpibert $MPIBERT_JOB: attempt $attempt ===="
  if [ "$MPIBERT_SCHEDULER" = slurm ]; then
    echo "SLURM job id: $MPIBERT_JOB_ID ($MPIBERT_JOB_NAME), partition ${MPIBERT_PARTITION:-?}, restart count $MPIBERT_RESTARTS"
  else
    echo "local job: $MPIBERT_JOB_ID (no SLURM)"
  fi
  echo "nodes: $MPIBERT_NODES ($MPIBERT_NUM_NODES), ranks $MPIBERT_RANKS, cpus per task ${MPIBERT_CPUS_PER_TASK:-?}, gpus $MPIBERT_GPUS, device $DEVICE"
  echo "date: $MPIBERT_ATTEMPT_START"
  echo "git commit: $(mpibert__git_commit)"
  echo "run directory: $RUN_DIR"
  [ -z "${MPIBERT_RUN_DIR_NOTE:-}" ] || echo "$MPIBERT_RUN_DIR_NOTE"
  echo "command: $MPIBERT_COMMAND"
  mpibert_write_job_json running ""
}

mpibert_log_end() {  # restore the job's own stdout/stderr and let tee finish job.log
  exec 1>&"$MPIBERT_STDOUT" 2>&"$MPIBERT_STDERR"
  wait "$MPIBERT_TEE_PID" 2>/dev/null || true
}

# job.json: the job and its attempts; previous attempts come from RUN_DIR/.job-attempts.jsonl.
mpibert_write_job_json() {  # STATE EXIT_STATUS
  local state=$1 status=$2 attempts="$RUN_DIR/.job-attempts.jsonl" current end="" first_start
  [ "$state" = running ] || end=$(mpibert__now)
  local submit_time
  submit_time=$(mpibert__scontrol_field SubmitTime)  # SLURM resets it on a requeue
  current="{\"attempt\": $(( MPIBERT_RESTARTS + 1 )), \"restart_count\": $MPIBERT_RESTARTS, \"nodes\": $(mpibert__json_str "$MPIBERT_NODES"), \"submit_time\": $(mpibert__json_str "$submit_time"), \"start_time\": $(mpibert__json_str "$MPIBERT_ATTEMPT_START"), \"end_time\": $( [ -n "$end" ] && mpibert__json_str "$end" || echo null), \"state\": $(mpibert__json_str "$state"), \"exit_status\": $(mpibert__json_num "$status")}"
  # The attempts before this one in this run directory (a requeued job's, and those of earlier
  # jobs when a run directory is reused with RUN_NAME), each with its job id.
  local previous="" mine
  [ ! -s "$attempts" ] || previous=$(awk 'NR > 1 { printf ", " } { printf "%s", $0 }' "$attempts")
  current="{\"job_id\": $(mpibert__json_str "$MPIBERT_JOB_ID"), ${current#\{}"
  mine=$(grep -F "{\"job_id\": $(mpibert__json_str "$MPIBERT_JOB_ID")," "$attempts" 2>/dev/null || true)
  if [ -n "$mine" ]; then
    first_start=$(head -n 1 <<< "$mine" | sed -n 's/.*"start_time": "\([^"]*\)".*/\1/p')
    submit_time=$(head -n 1 <<< "$mine" | sed -n 's/.*"submit_time": "\([^"]*\)".*/\1/p')
  fi
  [ -n "${first_start:-}" ] || first_start=$MPIBERT_ATTEMPT_START
  local tmp="$RUN_DIR/.job.json.$$"
  {
    echo "{"
    echo "  \"job_id\": $(mpibert__json_str "$MPIBERT_JOB_ID"),"
    echo "  \"job_name\": $(mpibert__json_str "$MPIBERT_JOB_NAME"),"
    echo "  \"job\": $(mpibert__json_str "$MPIBERT_JOB"),"
    echo "  \"scheduler\": $(mpibert__json_str "$MPIBERT_SCHEDULER"),"
    echo "  \"run_dir\": $(mpibert__json_str "$RUN_DIR"),"
    echo "  \"partition\": $(mpibert__json_str "$MPIBERT_PARTITION"),"
    echo "  \"nodes\": $(mpibert__json_str "$MPIBERT_NODES"),"
    echo "  \"num_nodes\": $(mpibert__json_num "$MPIBERT_NUM_NODES"),"
    echo "  \"tasks\": $(mpibert__json_num "$MPIBERT_RANKS"),"
    echo "  \"cpus_per_task\": $(mpibert__json_num "$MPIBERT_CPUS_PER_TASK"),"
    echo "  \"gpus\": $(mpibert__json_num "$MPIBERT_GPUS"),"
    echo "  \"device\": $(mpibert__json_str "$DEVICE"),"
    echo "  \"strategy\": $(mpibert__json_str "${MPIBERT_STRATEGY:-}"),"
    echo "  \"launcher\": $(mpibert__json_str "${MPIBERT_LAUNCHER:-}"),"
    echo "  \"submit_time\": $(mpibert__json_str "$submit_time"),"
    echo "  \"start_time\": $(mpibert__json_str "$first_start"),"
    echo "  \"end_time\": $( [ -n "$end" ] && mpibert__json_str "$end" || echo null),"
    echo "  \"state\": $(mpibert__json_str "$state"),"
    echo "  \"exit_status\": $(mpibert__json_num "$status"),"
    echo "  \"requeue_count\": $MPIBERT_RESTARTS,"
    echo "  \"git_commit\": $(mpibert__json_str "$(mpibert__git_commit)"),"
    echo "  \"command\": $(mpibert__json_str "$MPIBERT_COMMAND"),"
    echo "  \"attempts\": [${previous:+$previous, }$current]"
    echo "}"
  } > "$tmp"
  mv -f "$tmp" "$RUN_DIR/job.json"
  if [ "$state" != running ]; then
    echo "$current" >> "$attempts"
  fi
}

# --- running the ranks -------------------------------------------------------------------------
# Runs COMMAND in the background and waits for it; SIGUSR1 and SIGTERM that reach this shell
# (scancel --batch/--full, --signal=B:USR1@T, a local kill) are passed on to the launcher (srun
# and mpirun forward them to every rank). Sets MPIBERT_STATUS.
mpibert_run() {
  MPIBERT_TERMINATED=
  local pid
  "$@" &
  pid=$!
  # shellcheck disable=SC2064
  trap "kill -USR1 $pid 2>/dev/null || true" USR1
  # shellcheck disable=SC2064
  trap "MPIBERT_TERMINATED=1; kill -TERM $pid 2>/dev/null || true" TERM
  # shellcheck disable=SC2064
  trap "MPIBERT_TERMINATED=1; kill -INT $pid 2>/dev/null || true" INT
  while :; do
    MPIBERT_STATUS=0
    wait "$pid" || MPIBERT_STATUS=$?
    # wait returns early (status > 128) when a trapped signal arrives; the ranks go on.
    kill -0 "$pid" 2>/dev/null || break
  done
  MPIBERT_STATUS=0
  wait "$pid" 2>/dev/null || MPIBERT_STATUS=$?
  trap - USR1 TERM INT
}

# Records the attempt's end; on status 75 inside SLURM requeues the job (same job id, so the run
# directory and its checkpoints are found again: --resume auto). Returns the status to exit with.
mpibert_finish() {  # STATUS
  local status=$1
  if [ "$status" -eq 0 ]; then
    echo "==== finished: exit status 0 ($(mpibert__now)); run directory $RUN_DIR ===="
    mpibert_write_job_json completed 0
  elif [ "$status" -eq "$MPIBERT_EXIT_REQUEUE" ]; then
    if [ "$MPIBERT_SCHEDULER" = slurm ] && [ -z "$MPIBERT_TERMINATED" ]; then
      # Everything is written before `scontrol requeue`: SLURM then ends this job's processes.
      echo "==== exit status 75: checkpointed on a signal; requeueing job $MPIBERT_JOB_ID (scontrol requeue) ($(mpibert__now)) ===="
      mpibert_write_job_json requeued "$status"
      mpibert_log_end
      if ! scontrol requeue "$MPIBERT_JOB_ID"; then
        echo "[mpibert-job] scontrol requeue $MPIBERT_JOB_ID failed; resubmit with RUN_NAME=$(basename "$RUN_DIR") to resume" >&2
      fi
      return "$status"
    elif [ "$MPIBERT_SCHEDULER" = slurm ]; then
      # SIGTERM reached this shell too: the job is being cancelled, timed out or preempted by
      # SLURM (which requeues by itself when the partition's PreemptMode says so).
      echo "==== exit status 75: checkpointed; the job is ending (SIGTERM), not requeueing ($(mpibert__now)) ===="
      mpibert_write_job_json preempted "$status"
    else
      echo "==== exit status 75: checkpointed on a signal; resume with: RUN_NAME=$(basename "$RUN_DIR") ${MPIBERT_RESUME_HINT:-<the same command>} ===="
      mpibert_write_job_json preempted "$status"
    fi
  else
    echo "==== failed: exit status $status ($(mpibert__now)) ===="
    mpibert_write_job_json failed "$status"
  fi
  mpibert_log_end
  return "$status"
}

# --- jobs --------------------------------------------------------------------------------------
# JOB: baseline, multinode or a strategy's name; STRATEGY: the strategy it trains with, or "" (from
# the arguments' --strategy, else STRATEGY, else DEFAULT). Remaining arguments: more mpibert train options.
mpibert_train_job() {
  local job=$1 strategy=$2 default=${MPIBERT_DEFAULT_STRATEGY:-ddp}
  shift 2
  # shellcheck disable=SC2206
  local user_args=($TRAIN_ARGS "$@")
  mpibert__has_opt --output-dir "${user_args[@]}" &&
    mpibert__die "--output-dir is set by the job: use RUN_NAME=NAME (RESULTS_DIR/NAME) instead"
  local asked=""
  if mpibert__has_opt --strategy "${user_args[@]}"; then asked=$(mpibert__opt_value --strategy "${user_args[@]}"); fi
  if [ -z "$strategy" ]; then
    strategy=${asked:-${STRATEGY:-$default}}
  elif [ -n "$asked" ] && [ "$asked" != "$strategy" ]; then
    mpibert__die "the $job job trains with --strategy $strategy, not $asked"
  fi
  MPIBERT_STRATEGY=$strategy

  local ranks
  if [ "$MPIBERT_SCHEDULER" = slurm ]; then ranks=$(mpibert__slurm_ranks); else ranks=${RANKS:-1}; fi
  # Before the run directory: a global batch the ranks do not divide ends the job here.
  local per_rank=""
  if [ -n "${GLOBAL_BATCH:-}" ] && ! mpibert__has_opt --batch-size "${user_args[@]}" &&
     ! mpibert__has_opt --per_device_train_batch_size "${user_args[@]}"; then
    per_rank=$(mpibert__batch_for_global "$ranks" "${user_args[@]}") || return 1
  fi
  mpibert_identity "$job" "$ranks"
  mpibert_run_dir "$job-$strategy-${ranks}r-$MPIBERT_JOB_ID"
  mpibert_launcher "$ranks"

  # The run: site defaults first, then what the user gave (theirs replace ours, never doubled:
  # mpibert refuses an option given twice).
  local args=()
  mpibert__has_opt --config "${user_args[@]}" || [ -z "$CONFIG" ] || args+=(--config "$CONFIG")
  mpibert__has_opt --train-shards "${user_args[@]}" || args+=(--train-shards "$TRAIN_SHARDS")
  mpibert__has_opt --eval-shards "${user_args[@]}" || [ -z "$EVAL_SHARDS" ] || args+=(--eval-shards "$EVAL_SHARDS")
  if ! mpibert__has_opt --model "${user_args[@]}" && ! mpibert__has_opt --model-config "${user_args[@]}" &&
     [ -n "$MODEL_DIR" ]; then
    args+=(--model "$MODEL_DIR")
  fi
  mpibert__has_opt --vocab "${user_args[@]}" || args+=(--vocab "$VOCAB")
  mpibert__has_opt --threads "${user_args[@]}" || [ -z "$THREADS" ] || args+=(--threads "$THREADS")
  [ -z "$per_rank" ] || args+=(--batch-size "$per_rank")
  # DEVICE=gpu: each rank its node-local GPU (an error where there is none); cpu: the CPU.
  mpibert__has_opt --device "${user_args[@]}" || if [ "$DEVICE" = cpu ]; then args+=(--device cpu); else args+=(--device cuda); fi
  mpibert__has_opt --strategy "${user_args[@]}" || args+=(--strategy "$strategy")
  # Always resumable: a requeued job (same id, same run directory) continues from its checkpoint.
  mpibert__has_opt --resume "${user_args[@]}" || args+=(--resume auto)
  args+=(--output-dir "$RUN_DIR")
  local command=("${LAUNCH[@]}" "$MPIBERT_BIN_DIR/mpibert" train "${args[@]}" "${user_args[@]}")

  cd "$MPIBERT_ROOT" || return 1  # configs name their files relative to the repository root
  mpibert_log_begin "$(mpibert__quote "${command[@]}")"
  local status
  # With CONTAINER, MPIBERT_BIN_DIR is a folder of the image, not of this host.
  if [ -z "${CONTAINER:-}" ] && [ ! -x "$MPIBERT_BIN_DIR/mpibert" ]; then
    echo "[mpibert-job] $MPIBERT_BIN_DIR/mpibert not found: build with bash scripts/build.sh (MPIBERT_BIN_DIR)"
    status=1
  elif [ ! -f "$TRAIN_SHARDS/manifest.json" ] && ! mpibert__has_opt --train-shards "${user_args[@]}"; then
    echo "[mpibert-job] no shards in $TRAIN_SHARDS: run the prep job first (jobs/submit.sh prep), or set TRAIN_SHARDS"
    status=1
  else
    mpibert_run "${command[@]}"
    status=$MPIBERT_STATUS
  fi
  mpibert_finish "$status" || return $?
}

# The prep job: SQuAD JSON -> HDF5 shards, one per rank, in SHARDS_DIR/train and SHARDS_DIR/eval
# (what jobs/prep_squad.sh runs), then `mpibert-prep inspect` of each into the run directory.
# TRAIN_INPUT/EVAL_INPUT default to PREP_TRAIN_INPUT/PREP_EVAL_INPUT; "-" skips one.
mpibert_prep_job() {
  local train_input=${PREP_TRAIN_INPUT:-} eval_input=${PREP_EVAL_INPUT:-}
  if [ $# -gt 0 ] && [[ "$1" != -?* ]]; then train_input=$1; shift; fi
  if [ $# -gt 0 ] && [[ "$1" != -?* ]]; then eval_input=$1; shift; fi
  [ -n "$train_input$eval_input" ] || mpibert__die "prep: no input: give TRAIN.json [EVAL.json] (or PREP_TRAIN_INPUT/PREP_EVAL_INPUT)"
  local ranks
  if [ "$MPIBERT_SCHEDULER" = slurm ]; then ranks=$(mpibert__slurm_ranks); else ranks=${RANKS:-2}; fi
  MPIBERT_STRATEGY=
  mpibert_identity prep "$ranks"
  mpibert_run_dir "prep-${ranks}r-$MPIBERT_JOB_ID"
  mpibert_launcher "$ranks"
  cd "$MPIBERT_ROOT" || return 1
  local commands=() split input
  for split in train eval; do
    if [ "$split" = train ]; then input=$train_input; else input=$eval_input; fi
    [ -n "$input" ] && [ "$input" != - ] || continue
    commands+=("$(mpibert__quote "${LAUNCH[@]}" "$MPIBERT_BIN_DIR/mpibert-prep" --input "$input" --vocab "$VOCAB" \
                  --out "$SHARDS_DIR/$split" --split "$split" "$@")")
  done
  local joined
  joined=$(printf '%s; ' "${commands[@]}")
  mpibert_log_begin "${joined%; }"
  local status=0
  for split in train eval; do
    if [ "$split" = train ]; then input=$train_input; else input=$eval_input; fi
    [ -n "$input" ] && [ "$input" != - ] || continue
    echo "-- $split: $input -> $SHARDS_DIR/$split on $ranks ranks"
    mpibert_run "${LAUNCH[@]}" "$MPIBERT_BIN_DIR/mpibert-prep" --input "$input" --vocab "$VOCAB" \
      --out "$SHARDS_DIR/$split" --split "$split" "$@"
    status=$MPIBERT_STATUS
    [ "$status" -eq 0 ] || break
    # shellcheck disable=SC2086
    ${CONTAINER:-} "$MPIBERT_BIN_DIR/mpibert-prep" inspect "$SHARDS_DIR/$split" > "$RUN_DIR/prep_stats_$split.json" || { status=$?; break; }
    echo "-- $split: $(grep -E '^  "(features|examples|mean_length)"' "$RUN_DIR/prep_stats_$split.json" | tr -d ' \n')" \
         "(statistics: $RUN_DIR/prep_stats_$split.json)"
  done
  mpibert_finish "$status" || return $?
}
