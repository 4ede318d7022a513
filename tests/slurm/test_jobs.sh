#!/usr/bin/env bash
# ctest slurm.jobs: the SLURM jobs (jobs/) on a real, throwaway one-node SLURM.
#
# Installs slurm-wlm and munge when missing (scripts/install-slurm.sh; exit 77 = skipped only
# when that is impossible: not root and no password-less sudo), brings up munged + slurmctld +
# slurmd under a temporary directory (tests/slurm/cluster.sh), and submits through jobs/submit.sh,
# with a CPU site file (DEVICE=cpu, no GPUs; MPIBERT_SITE), on the bundled SQuAD sample split by
# article as scripts/main_job.sh does (16 articles train, the last 4 eval):
#   prep (2 tasks), then baseline (1), ddp, zero1, zero2, fsdp and hsdp (2 each) with --max-steps 8, batch 8, threads 1,
# and a job that is no strategy (refused, naming them); waits for them and checks each run directory (results.json: environment.slurm_job_id,
# world_size, parallel.strategy; job.log; job.json with exit status 0). Then preemption: a ddp job
# of 40 steps (--save-steps 0) gets SIGUSR1 on its steps (scancel --signal=USR1, what SLURM's
# --signal=USR1@120 does) after a few steps; it must checkpoint, exit 75, requeue itself, resume
# (resumed_from_step > 0) and finish at step 40 as the same job. The daemons are stopped at the
# end, also on failure; on failure the job logs and the daemons' logs are printed.
#
# Environment: MPIBERT_BIN_DIR (default build/bin), SLURM_TEST_KEEP=1 keeps the temporary directory,
# SLURM_TEST_DEADLINE (seconds for the whole test, default 1100; ctest's TIMEOUT is 1200), and
# tests/slurm/cluster.sh's SLURM_TEST_CPUS, SLURM_TEST_CRED_EXPIRE, SLURM_TEST_DEBUG.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
test_name=slurm.jobs
# shellcheck source=testlib.sh
source "$root/tests/slurm/testlib.sh"

# --- the cluster ----------------------------------------------------------------------------
say "starting a one-node SLURM under $cluster"
"$root/tests/slurm/cluster.sh" start "$cluster" || fail "the test cluster did not come up"
# shellcheck disable=SC1091
source "$cluster/env.sh"
say "cluster up: $(sinfo -h -o '%P %D %c %T')"

# --- data and site --------------------------------------------------------------------------
mkdir -p "$work/data"
squad=$root/data_prep/data/squad/dev-v1.1.json.gz
"$MPIBERT_BIN_DIR/mpibert-prep" split "$squad" --articles 0:16 --out "$work/data/train.json" >/dev/null || fail "split (train)"
"$MPIBERT_BIN_DIR/mpibert-prep" split "$squad" --articles -4:48 --out "$work/data/eval.json" >/dev/null || fail "split (eval)"

write_cpu_site

# --- prep, baseline and a job of every strategy mpibert lists --------------------------------------
train_args=(--max-steps 8 --batch-size 8 --logging-steps 2 --collective-timeout 120)
prep=$(submit prep --ntasks 2 -- "$work/data/train.json" "$work/data/eval.json" --log-level warn) || exit 1
baseline=$(submit baseline --dependency "afterok:$prep" -- "${train_args[@]}") || exit 1
ddp=$(submit ddp --dependency "afterok:$prep" -- "${train_args[@]}") || exit 1
zero1=$(submit zero1 --dependency "afterok:$prep" -- "${train_args[@]}") || exit 1
zero2=$(submit zero2 --dependency "afterok:$prep" -- "${train_args[@]}") || exit 1
fsdp=$(submit fsdp --dependency "afterok:$prep" -- "${train_args[@]}") || exit 1
hsdp=$(submit hsdp --dependency "afterok:$prep" -- "${train_args[@]}") || exit 1
say "submitted prep $prep, baseline $baseline, ddp $ddp, zero1 $zero1, zero2 $zero2, fsdp $fsdp, hsdp $hsdp"
# A job that is no strategy is refused by name, listing mpibert's.
if unknown=$($SLURM_CLIENT "$root/jobs/submit.sh" zero9 2>&1); then fail "submit.sh zero9 was accepted: $unknown"; fi
grep -q "unknown job 'zero9': prep, baseline, multinode or a strategy (ddp, zero1, zero2, fsdp, hsdp" <<< "$unknown" ||
  fail "submit.sh zero9: $unknown"

state=$(wait_done "$prep") || exit 1
[ "$state" = COMPLETED ] || fail "prep job $prep ended $state (exit code $(job_field "$prep" ExitCode))"
prep_dir=$results/prep-2r-$prep
for split in train eval; do
  [ -f "$work/shards/$split/manifest.json" ] || fail "prep: no $work/shards/$split/manifest.json"
  ls "$work/shards/$split"/shard-0000[01]-of-00002.h5 >/dev/null 2>&1 || fail "prep: not 2 shards in $work/shards/$split"
  [ -s "$prep_dir/prep_stats_$split.json" ] || fail "prep: no $prep_dir/prep_stats_$split.json"
done
grep -q '"exit_status": 0' "$prep_dir/job.json" || fail "prep: job.json lacks exit status 0"
say "prep $prep: COMPLETED; shards in $work/shards"

for spec in "$baseline baseline ddp 1" "$ddp ddp ddp 2" "$zero1 zero1 zero1 2" "$zero2 zero2 zero2 2" "$fsdp fsdp fsdp 2" \
            "$hsdp hsdp hsdp 2"; do
  read -r id job strategy ranks <<< "$spec"
  state=$(wait_done "$id") || exit 1
  [ "$state" = COMPLETED ] || fail "$job job $id ended $state (exit code $(job_field "$id" ExitCode))"
  say "$job $id: COMPLETED in $(job_field "$id" RunTime)"
  check_run "$id" "$job" "$strategy" "$ranks" || exit 1
done

# --- preemption: SIGUSR1, checkpoint, exit 75, requeue, resume --------------------------------
check_preemption ddp ddp 2
say "all SLURM job checks passed"
