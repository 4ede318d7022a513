#!/usr/bin/env bash
# ctest cluster.hsdp: hsdp on 2 test hosts x 2 ranks (tests/cluster/hosts.sh: network namespaces,
# TCP between the hosts, the default shard group: the 2 ranks of a host). Checked:
#   1. after 6 steps its weights equal ddp's on 1 host x 4 ranks within the sharded strategies'
#      round-off (1e-5);
#   2. the bytes that leave h1 per step (eth0's counter: the ranks of a host talk over loopback)
#      are those of one all-reduce of each rank's half of the gradients with its replica on h2:
#      2 ranks x S/2 = S, the gradients' bytes (from 3% below, for counting's slack, to 10% above:
#      TCP/IP headers, Open MPI's framing, the step's small host collectives); fsdp over the same
#      4 ranks sends over twice that;
#   3. a rank killed (SIGKILL) on h2 mid-run: the job ends within 30 s, non-zero, naming the rank.
# Needs root (network namespaces). MPIBERT_BIN_DIR (default build/bin); KEEP_TMP=1 keeps the files.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
source "$root/scripts/env.sh"
export OMP_NUM_THREADS=1
bin=${MPIBERT_BIN_DIR:-$root/build/bin}
hosts_sh=$root/tests/cluster/hosts.sh
python=$root/.venv/bin/python
start_time=$(date +%s)
say() { echo "[cluster.hsdp $(( $(date +%s) - start_time ))s] $*"; }
fail() { echo "FAIL: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || { echo "SKIPPED: the test hosts (network namespaces) need root; CI runs as root"; exit 77; }
for f in "$bin/mpibert" "$bin/mpibert-prep"; do [ -x "$f" ] || fail "$f not built (bash scripts/build.sh)"; done

work=$(mktemp -d "${TMPDIR:-/tmp}/mpibert-hsdp.XXXXXX")
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

vocab=$root/data_prep/data/bert-base-uncased/vocab.txt
"$bin/mpibert-prep" split "$root/data_prep/data/squad/dev-v1.1.json.gz" --articles 0:4 --out "$work/train.json" > /dev/null ||
  fail "split"
"$bin/mpibert-prep" --input "$work/train.json" --vocab "$vocab" --out "$work/shards" --split train --log-level warn || fail "prep"

train_args() {  # OUTPUT_DIR STEPS [more mpibert train options]
  local out=$1 steps=$2
  shift 2
  echo "$bin/mpibert train --model-config $root/configs/small-bert.json --vocab $vocab --train-shards $work/shards" \
       "--output-dir $out --batch-size 4 --threads 1 --seed 7 --logging-steps 0 --report-to none --max-steps $steps $*"
}
# 2 hosts x 2 ranks, in host order: ranks 0 and 1 on h1, 2 and 3 on h2.
on_hosts() {  # LOG COMMAND
  local log=$1
  shift
  HOSTS_RANKS_PER_HOST=2 bash "$hosts_sh" mpirun "$hosts" 2 "$*" > "$log" 2>&1
}
h1_sent() { ip -n "$HOSTS_PREFIX-h1" -s -j link show eth0 | "$python" -c 'import json,sys; print(json.load(sys.stdin)[0]["stats64"]["tx"]["bytes"])'; }

# --- 1. hsdp on 2 hosts x 2 ranks = ddp on 1 host x 4 ranks --------------------------------------
say "ddp on 1 host x 4 ranks, hsdp on 2 hosts x 2 ranks: 6 steps each"
mpirun -n 4 --oversubscribe --bind-to none $(train_args "$work/ddp" 6) > "$work/ddp.log" 2>&1 ||
  { cat "$work/ddp.log"; fail "ddp on 4 ranks"; }
on_hosts "$work/hsdp.log" "$(train_args "$work/hsdp" 6 --strategy hsdp)" || { cat "$work/hsdp.log"; fail "hsdp on 2 hosts x 2 ranks"; }
grep -q "sharded over 2 ranks and replicated 2 times" "$work/hsdp.log" ||
  { cat "$work/hsdp.log"; fail "hsdp's default shard group is not the 2 ranks of a host"; }
difference=$("$python" "$root/scripts/compare_weights.py" "$work/ddp/checkpoint-6/model.safetensors" \
  "$work/hsdp/checkpoint-6/model.safetensors" | tail -1 | cut -d' ' -f1)
"$python" -c "import sys; sys.exit(0 if float('$difference') < 1e-5 else 1)" ||
  fail "hsdp's weights differ from ddp's by $difference after 6 steps"
say "hsdp ends where ddp does: max |difference| $difference"

# --- 2. the bytes between the hosts per step -----------------------------------------------------
per_step() {  # NAME STRATEGY: bytes h1 sent per step, from runs of 2 and 6 steps (the setup cancels)
  local name=$1 strategy=$2 before after two six
  before=$(h1_sent)
  on_hosts "$work/$name-2.log" "$(train_args "$work/$name-2" 2 --strategy "$strategy" --save-strategy no)" || fail "$name, 2 steps"
  after=$(h1_sent)
  two=$((after - before))
  on_hosts "$work/$name-6.log" "$(train_args "$work/$name-6" 6 --strategy "$strategy" --save-strategy no)" || fail "$name, 6 steps"
  six=$(( $(h1_sent) - after ))
  echo $(( (six - two) / 4 ))
}
hsdp_step=$(per_step bytes-hsdp hsdp)
fsdp_step=$(per_step bytes-fsdp fsdp)
# The gradients' bytes S: what AdamW keeps of them per rank of a shard group of 2 is 2 moments x S/2.
gradient_bytes=$("$python" -c "import json; print(json.load(open('$work/hsdp/results.json'))['parallel']['optimizer_state_bytes_per_rank'])")
say "h1 sent per step: hsdp $hsdp_step bytes, fsdp $fsdp_step bytes; the gradients: $gradient_bytes bytes"
"$python" -c "import sys; sys.exit(0 if 0.97 <= $hsdp_step / $gradient_bytes <= 1.10 else 1)" ||
  fail "hsdp: h1 sent $hsdp_step bytes per step, not one all-reduce of each rank's half of $gradient_bytes bytes"
[ "$fsdp_step" -gt $(( 2 * hsdp_step )) ] || fail "fsdp sent $fsdp_step bytes per step, not over twice hsdp's $hsdp_step"

# --- 3. a rank killed on h2 ------------------------------------------------------------------------
say "killing a rank on h2 in the middle of an hsdp run"
on_hosts "$work/killed.log" "$(train_args "$work/killed" 400 --strategy hsdp | sed "s/--logging-steps 0/--logging-steps 1/")" &
launcher=$!
for _ in $(seq 1 240); do
  grep -q '"step":3' "$work/killed/metrics.jsonl" 2>/dev/null && break
  kill -0 "$launcher" 2>/dev/null || { cat "$work/killed.log"; fail "the run ended before the kill"; }
  sleep 0.5
done
victim=$(ip netns pids "$HOSTS_PREFIX-h2" | xargs -r ps -o pid=,comm= -p | awk '$2 == "mpibert" {print $1}' | head -n 1)
[ -n "$victim" ] || { kill "$launcher"; cat "$work/killed.log"; fail "no training rank found on h2"; }
kill -KILL "$victim"
killed_at=$(date +%s)
while kill -0 "$launcher" 2>/dev/null; do
  [ $(( $(date +%s) - killed_at )) -lt 60 ] || { kill -KILL "$launcher"; fail "mpirun still runs 60 s after the kill"; }
  sleep 0.5
done
ended_after=$(( $(date +%s) - killed_at ))
wait "$launcher" && fail "mpirun exited 0 after a rank was killed"
[ "$ended_after" -le 30 ] || fail "the job took ${ended_after} s (> 30 s) to end"
grep -Eq "rank [23] .*h2|h2.*rank [23]" "$work/killed.log" || { cat "$work/killed.log"; fail "no message names the rank on h2"; }
say "the job ended ${ended_after} s after the kill: $(grep -m1 -E 'rank [23] .*h2|h2.*rank [23]' "$work/killed.log")"
