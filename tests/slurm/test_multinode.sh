#!/usr/bin/env bash
# ctest slurm.multinode: the multinode job (jobs/train.sbatch, hsdp by default) on a real SLURM of two nodes that share no memory.
#
# tests/cluster/hosts.sh makes two test hosts (network namespaces h1 and h2 on a private /24);
# tests/slurm/cluster.sh runs slurmctld on h1 and one slurmd in each host (NodeName=h1/h2,
# NodeAddr their addresses). Through jobs/submit.sh multinode --nodes 2, with a CPU site of one
# task per node, srun --mpi=pmix starts rank 0 on h1 and rank 1 on h2, which talk over TCP:
#   1. 8 steps of hsdp (the multinode default; one rank a node: shard groups of 1): the run directory is complete (results.json: 2 ranks, the job id; job.json:
#      2 nodes, launcher srun, exit 0) and mpibert's log places the ranks on h1 and h2;
#   2. preemption across the nodes: SIGUSR1 after 3 steps of a 40-step job; it checkpoints, exits 75,
#      requeues itself, resumes on both nodes and finishes at step 40 as the same job;
#   3. requeued onto another node count: an fsdp job with GLOBAL_BATCH=16 runs on both nodes
#      (2 ranks x 8); h2 is drained and the job gets SIGUSR1: it checkpoints its shards and requeues,
#      and waits for h2; moved onto one node (scontrol update NumNodes=1 NumTasks=1), it resumes on
#      h1 (1 rank x 16) from the resharded checkpoint in its first run directory, to step 40.
# Needs root (network namespaces); installs SLURM when missing as slurm.jobs does. Environment:
# MPIBERT_BIN_DIR, SLURM_TEST_KEEP=1, SLURM_TEST_DEADLINE (default 1100 s).
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
test_name=slurm.multinode
[ "$(id -u)" -eq 0 ] || { echo "SKIPPED: the test hosts (network namespaces) need root; CI runs as root"; exit 77; }  # ctest: skipped
# shellcheck source=testlib.sh
source "$root/tests/slurm/testlib.sh"

hosts=$work/hosts
extra_cleanup() { bash "$root/tests/cluster/hosts.sh" down "$hosts"; }

# --- two hosts, one SLURM node in each ----------------------------------------------------------
bash "$root/tests/cluster/hosts.sh" up "$hosts" 2 || fail "the test hosts did not come up"
say "starting SLURM on test hosts h1 and h2 under $cluster"
"$root/tests/slurm/cluster.sh" start "$cluster" "$hosts" || fail "the test cluster did not come up"
# shellcheck disable=SC1091
source "$cluster/env.sh"
say "cluster up: $(sinfo -h -N -o '%N %c CPUs %T' | tr '\n' ' ')"

# --- data (prepared here: the prep job is slurm.jobs' concern) and site -------------------------
mkdir -p "$work/data"
squad=$root/data_prep/data/squad/dev-v1.1.json.gz
vocab=$root/data_prep/data/bert-base-uncased/vocab.txt
"$MPIBERT_BIN_DIR/mpibert-prep" split "$squad" --articles 0:8 --out "$work/data/train.json" >/dev/null || fail "split (train)"
"$MPIBERT_BIN_DIR/mpibert-prep" split "$squad" --articles -2:48 --out "$work/data/eval.json" >/dev/null || fail "split (eval)"
for split in train eval; do
  "$MPIBERT_BIN_DIR/mpibert-prep" --input "$work/data/$split.json" --vocab "$vocab" --out "$work/shards/$split" \
    --split "$split" --log-level warn || fail "prep of $split"
done
write_cpu_site ': "${TASKS_PER_NODE=1}"'

# --- 1. a multinode job on h1 and h2 -----------------------------------------------------------
id=$(submit multinode --nodes 2 -- --max-steps 8 --batch-size 8 --logging-steps 2 --collective-timeout 120) || exit 1
say "submitted multinode job $id (2 nodes x 1 task)"
state=$(wait_done "$id") || exit 1
[ "$state" = COMPLETED ] || fail "multinode job $id ended $state (exit code $(job_field "$id" ExitCode))"
say "multinode $id: COMPLETED in $(job_field "$id" RunTime) on $(job_field "$id" NodeList)"
check_run "$id" multinode hsdp 2 || exit 1  # hsdp unless the job says otherwise
dir=$results/multinode-hsdp-2r-$id
grep -q '"num_nodes": 2' "$dir/job.json" || fail "job.json does not record 2 nodes: $(grep nodes "$dir/job.json")"
grep -q "ranks run on h1 (rank 0), h2 (rank 1)" "$dir/job.log" ||
  fail "mpibert's log does not place rank 0 on h1 and rank 1 on h2: $(grep -m1 'ranks run on' "$dir/job.log")"
say "ranks: $(grep -m1 -o 'ranks run on.*' "$dir/job.log")"

# --- 2. preempted, requeued and resumed across the two nodes -------------------------------------
check_preemption multinode hsdp 2 --nodes 2

# --- 3. requeued by SLURM onto another number of nodes, resumed from the resharded checkpoint ----
export GLOBAL_BATCH=16
id=$(submit multinode --nodes 2 -- --strategy fsdp --max-steps 40 --save-steps 0 --logging-steps 1 \
  --collective-timeout 120) || exit 1
unset GLOBAL_BATCH
dir=$results/multinode-fsdp-2r-$id
say "node count: fsdp job $id on 2 nodes; waiting for 3 steps in $dir/metrics.jsonl"
wait_steps "$id" "$dir" 3 || exit 1
scontrol update NodeName=h2 State=DRAIN Reason=mpibert-requeue-test || fail "cannot drain h2"
say "node count: h2 drained; scancel --signal=USR1 $id"
scancel --signal=USR1 "$id" || fail "scancel --signal=USR1 $id failed"
until [ "$(job_field "$id" JobState)" = PENDING ] && [ "$(job_field "$id" Restarts)" -ge 1 ]; do
  [ "$(date +%s)" -lt "$deadline" ] || fail "job $id not requeued: $(job_field "$id" JobState)"
  sleep 0.5
done
scontrol update JobId="$id" NumNodes=1 NumTasks=1 || fail "cannot move the requeued job $id onto one node"
say "node count: job $id requeued, moved onto one node"
# Until it starts: its pending reason names the drained h2 until the scheduler looks at it again,
# which wait_done would take for a reason that never clears.
until [ "$(job_field "$id" JobState)" != PENDING ]; do
  [ "$(date +%s)" -lt "$deadline" ] || fail "job $id did not start on one node: $(job_field "$id" Reason)"
  sleep 0.5
done
state=$(wait_done "$id" 1) || exit 1
scontrol update NodeName=h2 State=RESUME || fail "cannot resume h2"
[ "$state" = COMPLETED ] || fail "job $id, requeued onto one node, ended $state (exit code $(job_field "$id" ExitCode))"
grep -q "requeued on 1 ranks: continuing in $dir" "$dir/job.log" || fail "job.log does not show the second attempt continuing in $dir"
grep -q "written by 2 ranks (fsdp), resharded for 1 ranks" "$dir/job.log" || fail "job.log does not show the resharding"
grep -q "resumed from .*checkpoint-" "$dir/job.log" || fail "job.log does not show the resume"
check_run_dir "$dir" "$id" <<'EOF' || fail "checks of the job requeued onto one node failed ($dir)"
a = j["attempts"]
expect(f"2 attempts ({len(a)})", len(a) == 2)
if len(a) == 2:
    expect(f"first attempt on h[1-2], exit 75 ({a[0]})", a[0]["nodes"] == "h[1-2]" and a[0]["exit_status"] == 75)
    expect(f"second attempt on h1, exit 0 ({a[1]})", a[1]["nodes"] == "h1" and a[1]["exit_status"] == 0)
expect(f"world_size {r['environment']['world_size']} == 1 at the end", r["environment"]["world_size"] == 1)
p = r["parameters"]
expect(f"global batch {p['global_batch_size']} == 16 from 1 rank x {p['batch_size']}",
       p["global_batch_size"] == 16 and p["batch_size"] == 16)
expect(f"resumed_from_step {r['resumed_from_step']} > 0", r["resumed_from_step"] > 0)
expect(f"global_step {r['global_step']} == 40", r["global_step"] == 40)
expect("model.safetensors present", os.path.isfile(os.path.join(d, "model.safetensors")))
report(f"  {os.path.basename(d)}: 2 ranks on h1,h2 to step {r['resumed_from_step']}, requeued, 1 rank on h1 "
       f"from the resharded checkpoint to step {r['global_step']} (global batch 16 throughout)")
EOF
say "all multinode SLURM checks passed"
