#!/usr/bin/env bash
# ctest slurm.multinode: jobs/multinode.sbatch on a real SLURM of two nodes that share no memory.
#
# tests/cluster/hosts.sh makes two test hosts (network namespaces h1 and h2 on a private /24);
# tests/slurm/cluster.sh runs slurmctld on h1 and one slurmd in each host (NodeName=h1/h2,
# NodeAddr their addresses). Through jobs/submit.sh multinode --nodes 2, with a CPU site of one
# task per node, srun --mpi=pmix starts rank 0 on h1 and rank 1 on h2, which talk over TCP:
#   1. 8 steps of ddp: the run directory is complete (results.json: 2 ranks, the job id; job.json:
#      2 nodes, launcher srun, exit 0) and mpibert's log places the ranks on h1 and h2;
#   2. preemption across the nodes: SIGUSR1 after 3 steps of a 40-step job; it checkpoints, exits 75,
#      requeues itself, resumes on both nodes and finishes at step 40 as the same job.
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
check_run "$id" multinode ddp 2 || exit 1
dir=$results/multinode-ddp-2r-$id
grep -q '"num_nodes": 2' "$dir/job.json" || fail "job.json does not record 2 nodes: $(grep nodes "$dir/job.json")"
grep -q "ranks run on h1 (rank 0), h2 (rank 1)" "$dir/job.log" ||
  fail "mpibert's log does not place rank 0 on h1 and rank 1 on h2: $(grep -m1 'ranks run on' "$dir/job.log")"
say "ranks: $(grep -m1 -o 'ranks run on.*' "$dir/job.log")"

# --- 2. preempted, requeued and resumed across the two nodes -------------------------------------
check_preemption multinode 2 --nodes 2
say "all multinode SLURM checks passed"
