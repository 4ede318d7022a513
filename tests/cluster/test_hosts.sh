#!/usr/bin/env bash
# ctest cluster.hosts: mpibert across two hosts that share no memory. tests/cluster/hosts.sh makes
# them (network namespaces h1 and h2 on a private /24); Open MPI starts its daemon on h2 through
# the namespace launch agent in ssh's place (plm_rsh_agent) and talks over TCP on that subnet only
# (btl tcp,self; oob and btl restricted to the subnet). Checked (the probe ports that name a lost
# rank across hosts: ctest cluster.probes, tests/cluster/test_probes.sh):
#   1. equivalence: the small BERT trained 4 steps on 2 hosts x 1 rank ends with the same bytes in
#      model.safetensors as on 1 host x 2 ranks over shared memory, for ddp, zero1, zero2 and fsdp;
#   2. a rank killed (SIGKILL) on h2 mid-run: every rank on both hosts is gone within 30 s, mpirun
#      exits non-zero naming the lost rank and its host, and no file under its final name in the
#      run directory is half-written (no results.json; every checkpoint-N complete);
#   3. h2's link set down mid-run: rank 0's collective timeout names rank 1 on h2 as unreachable,
#      every rank is gone within 30 s, mpirun exits non-zero (within 90 s), nothing half-written.
# Needs root (network namespaces). Environment: MPIBERT_BIN_DIR
# (default build/bin), KEEP_TMP=1 keeps the temporary directory.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
source "$root/scripts/env.sh"
export OMP_NUM_THREADS=1
bin=${MPIBERT_BIN_DIR:-$root/build/bin}
hosts_sh=$root/tests/cluster/hosts.sh
start_time=$(date +%s)
say() { echo "[cluster.hosts $(( $(date +%s) - start_time ))s] $*"; }
fail() { echo "FAIL: $*" >&2; exit 1; }

# 77 is ctest's skip code for this test (SKIP_RETURN_CODE): without root there are no test hosts.
[ "$(id -u)" -eq 0 ] || { echo "SKIPPED: the test hosts (network namespaces) need root; CI runs as root"; exit 77; }
for f in "$bin/mpibert" "$bin/mpibert-prep"; do [ -x "$f" ] || fail "$f not built (bash scripts/build.sh)"; done

work=$(mktemp -d "${TMPDIR:-/tmp}/mpibert-hosts.XXXXXX")
hosts=$work/hosts
cleanup() {
  local status=$?
  bash "$hosts_sh" down "$hosts"
  if [ "${KEEP_TMP:-0}" = 1 ] || [ "$status" -ne 0 ]; then echo "kept $work"; else rm -rf "$work"; fi
  say "done: $([ "$status" -eq 0 ] && echo passed || echo FAILED)"
}
trap cleanup EXIT
trap 'echo "interrupted"; exit 1' INT TERM

bash "$hosts_sh" up "$hosts" 2 || fail "the test hosts did not come up"
# shellcheck disable=SC1091
source "$hosts/hosts.env"

# --- data: 4 articles of the bundled SQuAD v1.1 dev set -------------------------------------
squad=$root/data_prep/data/squad/dev-v1.1.json.gz
vocab=$root/data_prep/data/bert-base-uncased/vocab.txt
"$bin/mpibert-prep" split "$squad" --articles 0:4 --out "$work/train.json" > /dev/null || fail "split"
"$bin/mpibert-prep" --input "$work/train.json" --vocab "$vocab" --out "$work/shards" --split train --log-level warn ||
  fail "prep"

train_args() {  # OUTPUT_DIR STRATEGY [more mpibert train options]
  local out=$1 strategy=$2
  shift 2
  echo "$bin/mpibert train --model-config $root/configs/small-bert.json --vocab $vocab --train-shards $work/shards" \
       "--output-dir $out --strategy $strategy --batch-size 4 --threads 1 --seed 7 --logging-steps 1 $*"
}
across_hosts() {  # LOG COMMAND: 2 ranks, one per host (hosts.sh mpirun: TCP on the test subnet)
  local log=$1
  shift
  bash "$hosts_sh" mpirun "$hosts" 2 "$*" > "$log" 2>&1
}

# --- 1. 2 hosts x 1 rank = 1 host x 2 ranks -------------------------------------------------
for strategy in ddp zero1 zero2 fsdp; do
  say "$strategy: 4 steps on 1 host x 2 ranks (shared memory), then on 2 hosts x 1 rank (TCP)"
  mpirun -n 2 --bind-to none $(train_args "$work/one-host-$strategy" "$strategy" --max-steps 4) \
    > "$work/one-host-$strategy.log" 2>&1 || { cat "$work/one-host-$strategy.log"; fail "1 host x 2 ranks ($strategy)"; }
  across_hosts "$work/two-hosts-$strategy.log" "$(train_args "$work/two-hosts-$strategy" "$strategy" --max-steps 4)" ||
    { cat "$work/two-hosts-$strategy.log"; fail "2 hosts x 1 rank ($strategy)"; }
  grep -q "Data for node: h2" "$work/two-hosts-$strategy.log" ||
    { cat "$work/two-hosts-$strategy.log"; fail "$strategy: mpirun's map has no rank on h2"; }
  cmp "$work/one-host-$strategy/checkpoint-4/model.safetensors" "$work/two-hosts-$strategy/checkpoint-4/model.safetensors" ||
    fail "$strategy: the weights after 4 steps differ between 1 host x 2 ranks and 2 hosts x 1 rank"
  say "$strategy: identical weights after 4 steps"
done

# --- faults: a run across the hosts, broken after its checkpoint-2 and step 4 -----------------
launcher="" out=""
start_faulty_run() {  # NAME [mpibert train options]: in the background, until checkpoint-2 and step 4
  local name=$1
  shift
  out=$work/$name
  across_hosts "$work/$name.log" "$(train_args "$out" ddp --max-steps 400 --save-steps 2 "$@")" &
  launcher=$!
  for _ in $(seq 1 240); do  # up to 120 s
    [ -d "$out/checkpoint-2" ] && grep -q '"step":4' "$out/metrics.jsonl" 2>/dev/null && return 0
    kill -0 "$launcher" 2>/dev/null || { cat "$work/$name.log"; fail "$name: the run ended before the fault"; }
    sleep 0.5
  done
  kill "$launcher"; cat "$work/$name.log"; fail "$name: no step 4 within 120 s"
}
training_pids() {  # HOST -> the mpibert processes in it (by executable: the launching shells
  # carry "mpibert train" in their arguments too)
  ip netns pids "$HOSTS_PREFIX-$1" | xargs -r ps -o pid=,comm= -p | awk '$2 == "mpibert" {print $1}'
}
training_processes() { training_pids "$1" | wc -l; }  # HOST
training_runs() { [ "$(training_processes h1)" -gt 0 ] || [ "$(training_processes h2)" -gt 0 ]; }
launcher_runs() { kill -0 "$launcher" 2>/dev/null; }
seconds_while() {  # SINCE LIMIT COMMAND...: seconds from SINCE until COMMAND fails, or "LIMIT+"
  local since=$1 limit=$2
  shift 2
  while "$@"; do
    [ $(( $(date +%s) - since )) -lt "$limit" ] || { echo "$limit+"; return; }
    sleep 0.5
  done
  echo $(( $(date +%s) - since ))
}
# Whatever a failed run was writing stays under its temporary name; what has its final name is whole.
check_nothing_half_written() {  # RUN_DIR
  [ ! -e "$1/results.json" ] || fail "results.json written by a failed run"
  for checkpoint in "$1"/checkpoint-*; do
    for file in model.safetensors optimizer.safetensors trainer_state.json rank-0.safetensors rank-1.safetensors; do
      [ -s "$checkpoint/$file" ] || fail "$checkpoint has no $file"
    done
  done
}

# --- 2. a rank killed on the other host --------------------------------------------------------
say "killing rank 1 on h2 in the middle of a run"
start_faulty_run killed
rank1=$(training_pids h2 | head -n 1)
[ -n "$rank1" ] || { kill "$launcher"; cat "$work/killed.log"; fail "no training rank found on h2"; }
kill -KILL "$rank1"
killed_at=$(date +%s)
ended_after=$(seconds_while "$killed_at" 60 launcher_runs)
[[ $ended_after != *+ ]] ||
  { kill -KILL "$launcher"; cat "$work/killed.log"; fail "mpirun still runs 60 s after rank 1 was killed on h2"; }
wait "$launcher" && fail "mpirun exited 0 after a rank was killed"
[ "$ended_after" -le 30 ] || fail "the job took ${ended_after} s (> 30 s) to end after rank 1 was killed"
for host in h1 h2; do
  [ "$(training_processes $host)" -eq 0 ] || fail "mpibert process(es) left on $host"
done
grep -Eq "rank 1 .*(h2)|h2.*rank 1" "$work/killed.log" ||
  { cat "$work/killed.log"; fail "mpirun's message does not name rank 1 on h2"; }
check_nothing_half_written "$out"
say "the job ended ${ended_after} s after the kill: $(grep -m1 -E 'rank 1 .*h2' "$work/killed.log")"

# --- 3. h2's link down in the middle of a run ----------------------------------------------------
# The ranks see a collective that never completes: after --collective-timeout the waiting rank
# probes its peers, names the one that does not answer, and aborts. mpirun then has to give up on
# its daemon on h2, which TCP decides: hosts.sh's hosts retry for about 13 s (tcp_retries2=5), and
# oob keepalives (below) let the daemon on h2 notice too; both are settings of the launch, not of
# mpibert (tests/cluster/hosts.sh and jobs/README.md).
say "setting h2's link down in the middle of a run (--collective-timeout 5)"
HOSTS_MPIRUN_ARGS="--mca oob_tcp_keepalive_time 10 --mca oob_tcp_keepalive_intvl 2 --mca oob_tcp_keepalive_probes 3" \
  start_faulty_run cut --collective-timeout 5
bash "$hosts_sh" link "$hosts" h2 down
cut_at=$(date +%s)
ranks_gone_after=$(seconds_while "$cut_at" 60 training_runs)
[[ $ranks_gone_after != *+ ]] || fail "mpibert still runs on h1 or h2 60 s after h2's link went down"
[ "$ranks_gone_after" -le 30 ] || fail "the ranks took ${ranks_gone_after} s (> 30 s) to end after h2's link went down"
ended_after=$(seconds_while "$cut_at" 90 launcher_runs)
[[ $ended_after != *+ ]] || { kill -KILL "$launcher"; cat "$work/cut.log"; fail "mpirun still runs 90 s after h2's link went down"; }
wait "$launcher" && fail "mpirun exited 0 after h2's link went down"
grep -q "collective timed out after .* on rank 0 (h1) while waiting for" "$work/cut.log" ||
  { cat "$work/cut.log"; fail "rank 0 did not report the collective timeout"; }
grep -q "rank 1 on h2 does not answer (nothing from .* its host or the link to it is down)" "$work/cut.log" ||
  { cat "$work/cut.log"; fail "the timeout report does not name rank 1 on h2 as unreachable"; }
check_nothing_half_written "$out"
say "ranks gone ${ranks_gone_after} s and mpirun ${ended_after} s after the cut: $(grep -m1 -o 'rank 1 on h2 does not answer.*' "$work/cut.log")"
