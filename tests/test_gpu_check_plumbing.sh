#!/usr/bin/env bash
# scripts/gpu_check.sh's plumbing with a stand-in for every row (--fake: no GPU, no binaries), what a
# lent GPU's few minutes depend on (ctest gpu_check.plumbing, about 30 s):
#   1. the rows never yet run on a GPU come first (the replayed step, a failed capture,
#      eager/graphed/HF throughput, kernels, fp16, hsdp, DistilBERT), before every row that passed before;
#   2. each row lands in --out as it finishes: a call killed outright (SIGKILL) leaves every finished
#      row in checks.md;
#   3. a row that hangs is ended by its limit and named, and the rows after it still run;
#   4. at --deadline the call writes what it has, names the rows not run, and exits 0; so does a
#      call stopped by SIGTERM.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
fail() { echo "FAIL: $*" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
check() { GPU_CHECK_DIR=$work/$1 bash "$root/scripts/gpu_check.sh" --fake --out "$work/$1/out" "${@:2}"; }
# The same in the background, $! being the call itself (not a subshell around it).
check_in_background() { (GPU_CHECK_DIR=$work/$1 exec bash "$root/scripts/gpu_check.sh" --fake --out "$work/$1/out" > "$work/$1.log" 2>&1) & }
ids() { sed -n 's/^| \([a-z0-9-]*\) | .*/\1/p' "$1" | grep -v '^check$'; }
position() { grep -nx -- "$2" <<< "$1" | cut -d: -f1; }

# 1. The order.
GPU_CHECK_FAKE_SECONDS=0.01 check order > "$work/order.log" 2>&1 || { tail -20 "$work/order.log"; fail "a call of stand-ins failed"; }
order=$(ids "$work/order/out/checks.md")
last_pending=0 first_passed=1000
for id in graphs graphs-failed-capture throughput-packed throughput-packed-graphs hf-peer kernels-packed kernels-packed-graphs fp16 hsdp-groups-of-1 hsdp \
          distilbert-packed families-packed families-throughput; do
  p=$(position "$order" "$id")
  [ -n "$p" ] || fail "row $id is missing: $(tr '\n' ' ' <<< "$order")"
  [ "$p" -lt "$last_pending" ] || last_pending=$p
done
for id in gpu-tests against-cpu ddp-2-nccl fsdp-3-nccl ddp-2-mpi ddp-bf16 reshard resume failing-rank evaluation profile \
          throughput-full throughput-dynamic; do
  p=$(position "$order" "$id")
  [ -n "$p" ] || fail "row $id is missing: $(tr '\n' ' ' <<< "$order")"
  [ "$p" -gt "$first_passed" ] || first_passed=$p
done
[ "$last_pending" -lt "$first_passed" ] || fail "a row never run on a GPU comes after one that passed before: $(tr '\n' ' ' <<< "$order")"
echo "ok: the $(wc -l <<< "$order") rows in order, the pending ones (1-$last_pending) first"

# 2. Killed outright after a few rows: what finished is in --out.
GPU_CHECK_FAKE_SECONDS=0.3 check_in_background killed
pid=$!
sleep 3
kill -KILL "$pid"
wait "$pid" 2> /dev/null || true
finished=$(ids "$work/killed/out/checks.md" | wc -l)
[ "$finished" -ge 3 ] || fail "killed after 3 s, --out holds $finished rows"
grep -q "^| graphs | a stand-in | ran | - | pass |$" "$work/killed/out/checks.md" || fail "checks.md lacks the finished graphs row"
echo "ok: killed after 3 s, $finished finished rows in --out"

# 3. A row that hangs: ended at its limit, named, and the call goes on.
rc=0
GPU_CHECK_FAKE_SECONDS=0.01 GPU_CHECK_FAKE_LIMIT=2 GPU_CHECK_FAKE_HANG=hf-peer check hang > "$work/hang.log" 2>&1 || rc=$?
[ $rc -eq 1 ] || fail "a call with a hung row exited $rc, not 1"
grep -q "^| hf-peer | - | ended at its limit of 2 s" "$work/hang/out/checks.md" || fail "the hung row is not named: $(grep hf-peer "$work/hang/out/checks.md")"
grep -q "^| throughput-dynamic | a stand-in | ran" "$work/hang/out/checks.md" || fail "the rows after the hung one did not run"
echo "ok: a hung row ended at its 2 s limit and named; the rows after it ran"

# 4. The deadline, and SIGTERM.
rc=0
GPU_CHECK_FAKE_SECONDS=0.5 check deadline --deadline 9 > "$work/deadline.log" 2>&1 || rc=$?
[ $rc -eq 0 ] || { tail "$work/deadline.log"; fail "a call cut by its deadline exited $rc, not 0"; }
[ -s "$work/deadline/out/unfinished.md" ] || fail "no unfinished.md after the deadline"
grep -q "^- throughput-dynamic$" "$work/deadline/out/unfinished.md" || fail "unfinished.md does not name the last row"
ran=$(ids "$work/deadline/out/checks.md" | wc -l)
not_run=$(grep -c '^- ' "$work/deadline/out/unfinished.md")
[ $(( ran + not_run )) -eq "$(wc -l <<< "$order")" ] || fail "$ran rows ran and $not_run not, of $(wc -l <<< "$order")"
[ -s "$work/deadline/out/logs.tar.gz" ] || fail "no logs.tar.gz at the deadline"
echo "ok: at the 9 s deadline $ran rows in --out, the other $not_run named in unfinished.md, exit 0"
GPU_CHECK_FAKE_SECONDS=0.3 check_in_background term
pid=$!
sleep 3
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
[ $rc -eq 0 ] || fail "a call stopped by SIGTERM exited $rc, not 0"
grep -q "stopped by a signal" "$work/term/out/unfinished.md" || fail "unfinished.md does not say the call was stopped"
echo "ok: SIGTERM: the rows so far in --out, the rest named, exit 0"
