#!/usr/bin/env bash
# results/compare end to end: three tiny training runs (1 rank; 2 ranks ddp; 2 ranks zero1) of the
# fixture model from random weights on a few SQuAD v1.1 dev articles, then the comparison table,
# plots and comparison.md are checked; and a run directory without results.json must fail.
# Registered in ctest as compare.report. Environment (all optional):
#   MPIBERT_BIN_DIR   where mpibert and mpibert-prep are (default: build/bin)
#   MPIBERT_FIXTURES  fixtures (default: tests/fixtures)
#   MPIEXEC           mpiexec to use (default: mpiexec on PATH)
#   KEEP_TMP=1        keep the temporary directory
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
source scripts/env.sh
export OMP_NUM_THREADS=1

bin=${MPIBERT_BIN_DIR:-$root/build/bin}
fixtures=${MPIBERT_FIXTURES:-$root/tests/fixtures}
mpiexec=${MPIEXEC:-mpiexec}
py=/usr/bin/python3
model_config=$fixtures/model/config.json
[ -f "$model_config" ] || model_config=$root/configs/small-bert.json
vocab=$root/data_prep/data/bert-base-uncased/vocab.txt
squad=$root/data_prep/data/squad/dev-v1.1.json.gz

for f in "$bin/mpibert" "$bin/mpibert-prep"; do
  [ -x "$f" ] || { echo "FAIL: $f not built"; exit 1; }
done
"$py" -c 'import matplotlib' || { echo "FAIL: $py lacks matplotlib (apt-get install python3-matplotlib)"; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/test_compare.XXXXXX")
if [ "${KEEP_TMP:-0}" = 1 ]; then echo "keeping $tmp"; else trap 'rm -rf "$tmp"' EXIT; fi

step() { echo "== $*"; }
# Runs a command with its output in a log; on failure prints the log and fails the test.
logged() {
  local log=$1; shift
  if ! "$@" >"$log" 2>&1; then
    echo "FAIL: command failed: $*"; echo "---- $log"; cat "$log"; exit 1
  fi
}

step "shards: articles 2 (112 questions) to train on, 32 (96 questions) to evaluate on"
logged "$tmp/prep.log" "$bin/mpibert-prep" split "$squad" --articles 2:3 --out "$tmp/train.json"
logged "$tmp/prep.log" "$bin/mpibert-prep" split "$squad" --articles 32:33 --out "$tmp/eval.json"
prep=(--vocab "$vocab" --max-seq-length 128 --doc-stride 64 --log-level warn)
logged "$tmp/prep.log" "$bin/mpibert-prep" --input "$tmp/train.json" --out "$tmp/shards/train" --split train "${prep[@]}"
logged "$tmp/prep.log" "$bin/mpibert-prep" --input "$tmp/eval.json" --out "$tmp/shards/eval" --split eval "${prep[@]}"

train=(train --train-shards "$tmp/shards/train" --eval-shards "$tmp/shards/eval" --model-config "$model_config"
       --vocab "$vocab" --max-steps 4 --eval-steps 2 --logging-steps 1 --batch-size 4 --eval-batch-size 32
       --learning-rate 1e-3 --threads 1 --log-level warn)
mpi=("$mpiexec" --oversubscribe --bind-to none -n 2)
step "run 1: 1 rank"
logged "$tmp/run1.log" "$bin/mpibert" "${train[@]}" --output-dir "$tmp/runs/r1-single"
step "run 2: 2 ranks, ddp"
logged "$tmp/run2.log" "${mpi[@]}" "$bin/mpibert" "${train[@]}" --strategy ddp --output-dir "$tmp/runs/r2-ddp"
step "run 3: 2 ranks, zero1"
logged "$tmp/run3.log" "${mpi[@]}" "$bin/mpibert" "${train[@]}" --strategy zero1 --output-dir "$tmp/runs/r2-zero1"

step "results/compare"
out=$tmp/report
set +e
# Given out of order, so the sort and the default baseline (fewest ranks) are exercised.
"$root/results/compare" "$tmp/runs/r2-zero1" "$tmp/runs/r2-ddp" "$tmp/runs/r1-single" \
  --out "$out" --title "compare test" >"$tmp/compare.out" 2>"$tmp/compare.err"
rc=$?
set -e
dump() {
  echo "---- results/compare stdout"; cat "$tmp/compare.out"
  echo "---- results/compare stderr"; cat "$tmp/compare.err"
  echo "---- $out"; ls -l "$out" 2>&1 || true
}
if [ $rc -ne 0 ]; then echo "FAIL: results/compare exited $rc"; dump; exit 1; fi
cat "$tmp/compare.out"

if ! "$py" - "$tmp/compare.out" "$out" "$tmp/runs" <<'EOF'
import json, os, sys
stdout_path, out, runs = sys.argv[1:]
text = open(stdout_path, encoding="utf-8").read()
failures = []
def check(cond, msg):
    if not cond:
        failures.append(msg)

rows = [l for l in text.splitlines() if l.startswith("|")]
cells = [[c.strip() for c in l.strip().strip("|").split("|")] for l in rows]
header, body = cells[0], [c for c in cells[2:]]
check(len(body) == 3, "expected 3 table rows, found %d" % len(body))
col = {name: header.index(name) for name in header}
for name in ("run", "strategy", "ranks", "samples/s", "speedup", "efficiency", "EM", "F1",
             "validation loss", "training time", "device", "epochs"):
    check(name in col, "column %r missing from the header %r" % (name, header))
if failures:
    print("\n".join("FAIL: " + f for f in failures)); sys.exit(1)

got = [(r[col["run"]], r[col["ranks"]], r[col["strategy"]]) for r in body]
want = [("r1-single", "1", "single"), ("r2-ddp", "2", "ddp"), ("r2-zero1", "2", "zero1")]
check(got == want, "rows (run, ranks, strategy) %r, expected %r" % (got, want))

def results(name):
    with open(os.path.join(runs, name, "results.json")) as f:
        return json.load(f)
base = results("r1-single")["train_step_samples_per_second"]
for r in body:
    name = r[col["run"]]
    res = results(name)
    sps = float(r[col["samples/s"]].replace(",", ""))
    check(abs(sps - res["train_step_samples_per_second"]) <= 0.006 + 1e-9,
          "%s: samples/s %s, results.json says %r" % (name, sps, res["train_step_samples_per_second"]))
    speedup = float(r[col["speedup"]])
    expect = res["train_step_samples_per_second"] / base
    check(abs(speedup - expect) <= 0.0051, "%s: speedup %s, expected %.4f (%r / %r)"
          % (name, speedup, expect, res["train_step_samples_per_second"], base))
    eff = float(r[col["efficiency"]].rstrip("%"))
    ranks = res["parallel"]["world_size"]
    check(abs(eff - 100 * expect / ranks) <= 0.51, "%s: efficiency %s%%, expected %.2f%%"
          % (name, eff, 100 * expect / ranks))
    f1 = r[col["F1"]]
    check(f1 != "\u2013" and abs(float(f1) - res["eval_f1"]) <= 0.0051,
          "%s: F1 %s, results.json says %r" % (name, f1, res.get("eval_f1")))
    check(r[col["validation loss"]] != "\u2013", "%s: validation loss missing" % name)
    check(":" in r[col["training time"]] and "s)" in r[col["training time"]],
          "%s: training time %r is not h:mm:ss (seconds)" % (name, r[col["training time"]]))
check(body[0][col["speedup"]] == "1.00", "baseline row speedup %r, expected 1.00" % body[0][col["speedup"]])
check("Baseline: **r1-single**" in text, "no line naming r1-single as the baseline")
check("Speedup =" in text and "efficiency =" in text, "no definition of speedup/efficiency")

md_path = os.path.join(out, "comparison.md")
check(os.path.isfile(md_path), "comparison.md missing")
md = open(md_path, encoding="utf-8").read() if os.path.isfile(md_path) else ""
for png in ("loss.png", "scaling.png", "phases.png"):
    p = os.path.join(out, png)
    if not os.path.isfile(p):
        check(False, "%s missing" % png); continue
    data = open(p, "rb").read()
    check(data[:8] == b"\x89PNG\r\n\x1a\n", "%s does not start with the PNG signature" % png)
    check(len(data) > 10 * 1024, "%s is only %d bytes" % (png, len(data)))
    check("](%s)" % png in md, "comparison.md does not link %s" % png)
check("| r2-zero1 " in md or "| r2-zero1" in md, "comparison.md lacks the table")
if failures:
    print("\n".join("FAIL: " + f for f in failures)); sys.exit(1)
print("table, speedups, plots and comparison.md: ok")
EOF
then dump; exit 1; fi

step "a run directory without results.json"
mkdir -p "$tmp/runs/broken"
cp "$tmp/runs/r1-single/metrics.jsonl" "$tmp/runs/broken/"
set +e
"$root/results/compare" "$tmp/runs/r1-single" "$tmp/runs/broken" --out "$tmp/report2" >"$tmp/broken.out" 2>&1
rc=$?
set -e
if [ $rc -ne 1 ] || ! grep -qF "$tmp/runs/broken" "$tmp/broken.out" || ! grep -qF "results.json" "$tmp/broken.out"; then
  echo "FAIL: missing results.json: exit $rc (expected 1), output should name $tmp/runs/broken and results.json:"
  cat "$tmp/broken.out"; exit 1
fi
cat "$tmp/broken.out"

step "a malformed results.json"
echo '{"train_runtime": 1.0,' > "$tmp/runs/broken/results.json"
set +e
"$root/results/compare" "$tmp/runs/broken" --out "$tmp/report2" >"$tmp/broken.out" 2>&1
rc=$?
set -e
if [ $rc -ne 1 ] || ! grep -qF "$tmp/runs/broken" "$tmp/broken.out" || ! grep -q "malformed" "$tmp/broken.out"; then
  echo "FAIL: malformed results.json: exit $rc (expected 1), output should name $tmp/runs/broken:"
  cat "$tmp/broken.out"; exit 1
fi
cat "$tmp/broken.out"
echo "PASS"
