#!/usr/bin/env bash
# ctest cluster.hosts: mpibert across two hosts that share no memory. tests/cluster/hosts.sh makes
# them (network namespaces h1 and h2 on a private /24); Open MPI starts its daemon on h2 through
# the namespace launch agent in ssh's place (plm_rsh_agent) and talks over TCP on that subnet only
# (btl tcp,self; oob and btl restricted to the subnet). Checked:
#   1. equivalence: the small BERT trained 4 steps on 2 hosts x 1 rank ends with the same bytes in
#      model.safetensors as on 1 host x 2 ranks over shared memory, for ddp and for zero1;
#   2. a rank killed (SIGKILL) on h2 mid-run: every rank on both hosts is gone within 30 s, mpirun
#      exits non-zero naming the lost rank and its host, and no file under its final name in the
#      run directory is half-written (no results.json; every checkpoint-N complete).
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

[ "$(id -u)" -eq 0 ] || fail "network namespaces need root (CI runs as root)"
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
# mpirun on h1 for ranks on h1 and h2: TCP on the test subnet only, h2 reached through the agent.
across_hosts() {  # LOG COMMAND: 2 ranks, one per host
  local log=$1
  shift
  bash "$hosts_sh" exec "$hosts" h1 \
    "mpirun -n 2 --host h1,h2 --bind-to none --display-map --mca plm_rsh_agent $hosts/agent --mca btl tcp,self" \
    "--mca btl_tcp_if_include $HOSTS_SUBNET --mca oob_tcp_if_include $HOSTS_SUBNET" \
    "-x OMP_NUM_THREADS $*" > "$log" 2>&1
}

# --- 1. 2 hosts x 1 rank = 1 host x 2 ranks -------------------------------------------------
for strategy in ddp zero1; do
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

# --- 2. a rank killed on the other host --------------------------------------------------------
say "killing rank 1 on h2 in the middle of a run"
out=$work/killed
across_hosts "$work/killed.log" "$(train_args "$out" ddp --max-steps 400 --save-steps 2)" &
launcher=$!
rank1=""
for _ in $(seq 1 240); do  # up to 120 s for a checkpoint and a few more steps
  if [ -d "$out/checkpoint-2" ] && grep -q '"step":4' "$out/metrics.jsonl" 2>/dev/null; then
    rank1=$(ip netns pids "$HOSTS_PREFIX-h2" | xargs -r ps -o pid=,args= -p | awk '/mpibert train/ {print $1; exit}')
    [ -n "$rank1" ] && break
  fi
  kill -0 "$launcher" 2>/dev/null || { cat "$work/killed.log"; fail "the run ended before the kill"; }
  sleep 0.5
done
[ -n "$rank1" ] || { kill "$launcher"; cat "$work/killed.log"; fail "no training rank found on h2"; }
kill -KILL "$rank1"
killed_at=$(date +%s)
while kill -0 "$launcher" 2>/dev/null && [ $(( $(date +%s) - killed_at )) -lt 60 ]; do sleep 0.5; done
ended_after=$(( $(date +%s) - killed_at ))
if kill -0 "$launcher" 2>/dev/null; then
  kill -KILL "$launcher"
  cat "$work/killed.log"
  fail "mpirun still runs 60 s after rank 1 was killed on h2"
fi
wait "$launcher" && fail "mpirun exited 0 after a rank was killed"
[ "$ended_after" -le 30 ] || fail "the job took ${ended_after} s (> 30 s) to end after rank 1 was killed"
for ns in "$HOSTS_PREFIX-h1" "$HOSTS_PREFIX-h2"; do
  left=$(ip netns pids "$ns" | xargs -r ps -o args= -p | grep -c "mpibert train" || true)
  [ "$left" -eq 0 ] || fail "$left mpibert process(es) left in $ns"
done
grep -Eq "rank 1 .*(h2)|h2.*rank 1" "$work/killed.log" ||
  { cat "$work/killed.log"; fail "mpirun's message does not name rank 1 on h2"; }
# Whatever a killed rank was writing stays under its temporary name; what has its final name is whole.
[ ! -e "$out/results.json" ] || fail "results.json written by a failed run"
for checkpoint in "$out"/checkpoint-*; do
  for file in model.safetensors optimizer.safetensors trainer_state.json rank-0.safetensors rank-1.safetensors; do
    [ -s "$checkpoint/$file" ] || fail "$checkpoint has no $file"
  done
done
say "the job ended ${ended_after} s after the kill: $(grep -m1 -E 'rank 1' "$work/killed.log")"
