#!/usr/bin/env bash
# Shared by the SLURM tests (test_jobs.sh: one node; test_multinode.sh: nodes on test hosts).
# Sourced after `root` (the repository) and `test_name` (the ctest name) are set. It installs
# SLURM when missing (exit 77, a skip, only when that is impossible), scrubs the environment of
# any outer job, makes the work directory ($work, $cluster, $results), and sets the EXIT trap:
# on failure the job logs and the daemons' logs are printed; the cluster is stopped in every case,
# then `extra_cleanup` runs when the test defines it. After `source "$cluster/env.sh"`, client
# commands reach slurmctld (SLURM_CLIENT: the prefix for programs that call them, jobs/submit.sh).

start_time=$(date +%s)
deadline=$(( start_time + ${SLURM_TEST_DEADLINE:-1100} ))
say() { echo "[$test_name $(( $(date +%s) - start_time ))s] $*"; }

# --- SLURM and munge ---------------------------------------------------------------------
have_slurm() { command -v slurmctld && command -v slurmd && command -v sbatch && command -v munged; } >/dev/null 2>&1
if ! have_slurm; then
  if [ "$(id -u)" -ne 0 ] && ! { command -v sudo >/dev/null && sudo -n true 2>/dev/null; }; then
    echo "SKIP: slurm-wlm/munge are not installed, and this is not root and has no password-less sudo"
    echo "      (bash scripts/install-slurm.sh as root installs them)"
    exit 77
  fi
  say "installing slurm-wlm and munge (scripts/install-slurm.sh)"
  bash "$root/scripts/install-slurm.sh" || { echo "FAIL: scripts/install-slurm.sh failed"; exit 1; }
  have_slurm || { echo "FAIL: SLURM still missing after scripts/install-slurm.sh"; exit 1; }
fi
export MPIBERT_BIN_DIR=${MPIBERT_BIN_DIR:-$root/build/bin}
for b in mpibert mpibert-prep; do
  [ -x "$MPIBERT_BIN_DIR/$b" ] || { echo "FAIL: $MPIBERT_BIN_DIR/$b not built (bash scripts/build.sh)"; exit 1; }
done
python=$(command -v python3) || { echo "FAIL: python3 is needed to read the JSON results"; exit 1; }

# Nothing from an outer SLURM job or an outer configuration of the jobs may leak in.
while IFS='=' read -r name _; do
  case "$name" in SLURM_TEST_*) ;; SLURM_*|SBATCH_*|SRUN_*|SALLOC_*|SQUEUE_*|SCANCEL_*) unset "$name" ;; esac
done < <(env)
for v in PARTITION ACCOUNT QOS TIME_LIMIT PREP_PARTITION PREP_TASKS PREP_TIME_LIMIT PREP_CPUS_PER_TASK \
         MULTINODE_NODES SBATCH_EXTRA DEVICE GPUS_PER_NODE GRES TASKS_PER_NODE CPUS_PER_TASK THREADS MODULES \
         LAUNCHER SRUN_MPI SRUN_ARGS MPIRUN_ARGS CONTAINER RESULTS_DIR SHARDS_DIR TRAIN_SHARDS EVAL_SHARDS MODEL_DIR \
         CONFIG VOCAB TRAIN_ARGS GLOBAL_BATCH RUN_NAME STRATEGY RANKS MPIBERT_SITE MPIBERT_ROOT MPIBERT_LOCAL; do
  unset "$v"
done

work=$(mktemp -d "${TMPDIR:-/tmp}/mpibert-slurm.XXXXXX")
cluster=$work/cluster
failed=0
job_ids=()

diagnostics() {
  echo "================ diagnostics ================"
  if [ -f "$cluster/env.sh" ]; then
    # shellcheck disable=SC1091
    source "$cluster/env.sh"
    echo "--- squeue"; squeue -a 2>&1 || true
    echo "--- sinfo"; sinfo -N -l 2>&1 || true
    for id in "${job_ids[@]}"; do
      echo "--- scontrol show job $id"; scontrol show job "$id" 2>&1 || true
    done
  fi
  local f
  for f in "$work"/results/slurm/*.out; do
    [ -f "$f" ] || continue
    echo "--- $f (last 60 lines)"; tail -n 60 "$f"
  done
  for f in "$work"/results/*/job.json; do
    [ -f "$f" ] || continue
    echo "--- $f"; cat "$f"
  done
  for f in "$cluster"/log/*; do
    [ -f "$f" ] || continue
    echo "--- $f (last 60 lines)"; tail -n 60 "$f"
  done
}

cleanup() {
  local status=$?
  [ "$failed" -eq 0 ] && [ "$status" -eq 0 ] || { failed=1; diagnostics; }
  [ ! -d "$cluster/run" ] || "$root/tests/slurm/cluster.sh" stop "$cluster"
  ! declare -F extra_cleanup >/dev/null || extra_cleanup
  if [ -n "${SLURM_TEST_KEEP:-}" ] || [ "$failed" -ne 0 ]; then
    echo "kept $work"
  else
    rm -rf "$work"
  fi
  say "done: $([ "$failed" -eq 0 ] && echo passed || echo FAILED)"
}
trap cleanup EXIT
trap 'echo "interrupted"; exit 1' INT TERM

# Also called inside $(...): the message goes to stderr so that it is not captured.
fail() { echo "FAIL: $*" >&2; failed=1; exit 1; }
results=$work/results
SLURM_CLIENT=""

# The CPU site: the site's own file for everything else (its values yield to these). Extra
# `: "${NAME=value}"` lines may be given as arguments.
write_cpu_site() {  # [LINE...]
  {
    echo "# $test_name: CPU-only test site on the throwaway cluster."
    printf '%s\n' "$@"
    cat <<EOF
: "\${DEVICE=cpu}"
: "\${CPUS_PER_TASK=1}"
: "\${THREADS=1}"
: "\${TIME_LIMIT=00:20:00}"
: "\${PREP_TIME_LIMIT=00:10:00}"
: "\${RESULTS_DIR=$results}"
: "\${SHARDS_DIR=$work/shards}"
: "\${CONFIG=\$MPIBERT_ROOT/configs/main_job.toml}"
source "\$MPIBERT_ROOT/jobs/site.env"
EOF
  } > "$work/site.env"
  export MPIBERT_SITE=$work/site.env
}

submit() {  # JOB [submit.sh options] [-- args] -> job id on stdout
  local id
  # shellcheck disable=SC2086
  id=$($SLURM_CLIENT "$root/jobs/submit.sh" "$@") || fail "jobs/submit.sh $* failed"
  [[ "$id" =~ ^[0-9]+$ ]] || fail "jobs/submit.sh $* printed '$id', not a job id"
  job_ids+=("$id")
  echo "$id"
}

job_field() {  # ID FIELD -> value from scontrol show job
  scontrol show job -o "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n 1
}

wait_done() {  # ID [MIN_RESTARTS]: until the job is finished (and restarted at least that often)
  local id=$1 min_restarts=${2:-0} state restarts
  while :; do
    state=$(job_field "$id" JobState)
    restarts=$(job_field "$id" Restarts)
    case "$state" in
      COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE|PREEMPTED)
        [ "${restarts:-0}" -ge "$min_restarts" ] && { echo "$state"; return 0; } ;;
      "") fail "job $id unknown to slurmctld" ;;
      PENDING)
        # Reasons that never clear by themselves: fail now, not at the deadline.
        case "$(job_field "$id" Reason)" in
          PartitionNodeLimit|PartitionConfig|PartitionTimeLimit|BadConstraints|DependencyNeverSatisfied|InvalidAccount|InvalidQOS|ReqNodeNotAvail*|Nodes_required*|JobHeldAdmin|JobHeldUser)
            fail "job $id cannot start: $(job_field "$id" Reason) (node: $(sinfo -h -N -o '%N %c CPUs %T'))" ;;
        esac ;;
    esac
    [ "$(date +%s)" -lt "$deadline" ] || fail "deadline passed waiting for job $id (state $state, restarts $restarts)"
    sleep 1
  done
}

check_run() {  # ID JOB STRATEGY RANKS [STEPS]: the run directory of a finished training job
  local id=$1 job=$2 strategy=$3 ranks=$4 steps=${5:-8}
  local dir=$results/$job-$strategy-${ranks}r-$id
  [ -d "$dir" ] || fail "job $id: no run directory $dir"
  [ -f "$dir/job.log" ] || fail "job $id: no job.log"
  grep -q "^SLURM job id: $id " "$dir/job.log" || fail "job $id: job.log lacks the job id line"
  grep -q "^command: " "$dir/job.log" || fail "job $id: job.log lacks the command"
  "$python" - "$dir" "$id" "$strategy" "$ranks" "$steps" <<'EOF' || fail "job $id: checks of $dir failed"
import json, sys, os
d, job_id, strategy, ranks, steps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
r = json.load(open(os.path.join(d, "results.json")))
j = json.load(open(os.path.join(d, "job.json")))
problems = []
def expect(what, got, want):
    if got != want: problems.append(f"{what} = {got!r}, expected {want!r}")
expect("results environment.slurm_job_id", r["environment"]["slurm_job_id"], job_id)
expect("results environment.world_size", r["environment"]["world_size"], ranks)
expect("results parallel.strategy", r["parallel"]["strategy"], strategy)
expect("results global_step", r["global_step"], steps)
if "eval_f1" not in r: problems.append("results.json has no eval_f1")
expect("job.json job_id", j["job_id"], job_id)
expect("job.json exit_status", j["exit_status"], 0)
expect("job.json state", j["state"], "completed")
expect("job.json tasks", j["tasks"], ranks)
expect("job.json launcher", j["launcher"], "srun")
for f in ("metrics.jsonl", "train_config.toml", "predictions.json", f"checkpoint-{steps}"):
    if not os.path.exists(os.path.join(d, f)): problems.append(f"{f} missing")
for p in problems: print(f"  {d}: {p}")
print(f"  {os.path.basename(d)}: world_size {r['environment']['world_size']}, strategy {r['parallel']['strategy']}, "
      f"step {r['global_step']}, {r['train_samples_per_second']:.1f} samples/s, eval_f1 {r['eval_f1']:.2f}"
      if not problems else "")
sys.exit(1 if problems else 0)
EOF
}

# Python checks of a finished job's run directory, given on stdin; they run after this preamble:
# d (the directory), job_id, r (results.json), j (job.json), expect(what, ok) collecting problems,
# and report(done), which prints the problems, or `done` when there are none, and exits with 1 or 0.
run_dir_checks_preamble='import json, os, sys
d, job_id = sys.argv[1], sys.argv[2]
r = json.load(open(os.path.join(d, "results.json")))
j = json.load(open(os.path.join(d, "job.json")))
problems = []
def expect(what, ok):
    if not ok: problems.append(what)
def report(done):
    for p in problems: print(f"  {d}: {p}")
    if not problems: print(done)
    sys.exit(1 if problems else 0)'
check_run_dir() {  # DIR ID < checks
  "$python" -c "$run_dir_checks_preamble
$(cat)" "$1" "$2"
}

wait_steps() {  # ID RUN_DIR N: until job ID has logged N steps in RUN_DIR/metrics.jsonl
  local id=$1 dir=$2 want=$3 steps state
  while :; do
    steps=$(grep -c '"step"' "$dir/metrics.jsonl" 2>/dev/null || true)
    [ "${steps:-0}" -ge "$want" ] && return 0
    state=$(job_field "$id" JobState)
    case "$state" in RUNNING|PENDING|CONFIGURING) ;; *) fail "job $id is $state before it was signalled" ;; esac
    [ "$(date +%s)" -lt "$deadline" ] || fail "deadline passed waiting for steps of job $id"
    sleep 0.5
  done
}

# A training job of 40 steps (--save-steps 0; STRATEGY is the one it trains with: ddp, or hsdp for
# multinode) gets SIGUSR1 on its steps (scancel --signal=USR1, what SLURM's --signal=USR1@120 does)
# after 3 steps: it must checkpoint, exit 75, requeue itself, resume (resumed_from_step > 0) and
# finish at step 40 as the same job.
check_preemption() {  # JOB STRATEGY RANKS [jobs/submit.sh options]
  local job=$1 strategy=$2 ranks=$3 long dir state
  shift 3
  long=$(submit "$job" "$@" -- --max-steps 40 --save-steps 0 --batch-size 8 --logging-steps 1 --collective-timeout 120) || exit 1
  dir=$results/$job-$strategy-${ranks}r-$long
  say "preemption: $job job $long (40 steps); waiting for 3 steps in $dir/metrics.jsonl"
  wait_steps "$long" "$dir" 3 || exit 1
  say "preemption: 3 steps done; scancel --signal=USR1 $long"
  scancel --signal=USR1 "$long" || fail "scancel --signal=USR1 $long failed"
  state=$(wait_done "$long" 1) || exit 1
  [ "$state" = COMPLETED ] || fail "preempted job $long ended $state (exit code $(job_field "$long" ExitCode))"
  say "preemption: job $long COMPLETED after $(job_field "$long" Restarts) requeue(s)"
  grep -q "requeueing job $long" "$dir/job.log" || fail "job.log does not show the requeue"
  grep -q "attempt 2" "$dir/job.log" || fail "job.log does not show a second attempt"
  grep -q "resumed from .*checkpoint-" "$dir/job.log" || fail "job.log does not show the resume"
  check_run_dir "$dir" "$long" <<'EOF' || fail "preemption checks of $dir failed"
expect(f"resumed_from_step {r['resumed_from_step']} > 0", r["resumed_from_step"] > 0)
expect(f"global_step {r['global_step']} == 40", r["global_step"] == 40)
expect(f"preempted {r['preempted']} is false at the end", r["preempted"] is False)
expect(f"results environment.slurm_job_id {r['environment']['slurm_job_id']} == {job_id}", r["environment"]["slurm_job_id"] == job_id)
expect(f"job.json exit_status {j['exit_status']} == 0", j["exit_status"] == 0)
expect(f"job.json requeue_count {j['requeue_count']} >= 1", j["requeue_count"] >= 1)
a = j["attempts"]
expect(f"job.json has 2 attempts ({len(a)})", len(a) == 2)
if len(a) == 2:
    expect(f"first attempt exit 75, requeued ({a[0]})", a[0]["exit_status"] == 75 and a[0]["state"] == "requeued")
    expect(f"second attempt exit 0 ({a[1]})", a[1]["exit_status"] == 0 and a[1]["state"] == "completed")
    expect("both attempts of the same job", a[0]["job_id"] == a[1]["job_id"] == job_id)
expect("checkpoint-40 present", os.path.isdir(os.path.join(d, "checkpoint-40")))
report(f"  {os.path.basename(d)}: stopped and checkpointed at step {r['resumed_from_step']}, exit 75, requeued, "
       f"resumed, finished at step {r['global_step']} (eval_f1 {r.get('eval_f1', float('nan')):.2f})")
EOF
}
