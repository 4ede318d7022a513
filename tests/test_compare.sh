#!/usr/bin/env bash
# tools/compare end to end: four tiny training runs (1 rank; 2 ranks ddp, zero1, fsdp) of the
# fixture model from random weights on a few SQuAD v1.1 dev articles, beside the output directory
# of the real HF Trainer and the CSV log of Lightning's Trainer (tests/peer_runs), then the table,
# the notes on what each source does not record, the validation loss by epoch, the memory per rank,
# the MFU, the plots and comparison.md are checked; mpibert's
# HF-named files read as an HF output_dir give the same figures; a run directory of none of the
# three kinds, or a malformed results.json, must fail.
# Registered in ctest as compare.report. Environment (all optional):
#   MPIBERT_BIN_DIR   where mpibert and mpibert-prep are (default: build/bin)
#   MPIBERT_FIXTURES  fixtures (default: tests/fixtures)
#   MPIEXEC           mpiexec to use (default: mpiexec on PATH)
#   MPIBERT_TOOLS_PYTHON  the Python of the tools (default: the checkout's .venv)
#   KEEP_TMP=1        keep the temporary directory
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
source scripts/env.sh
export OMP_NUM_THREADS=1

bin=${MPIBERT_BIN_DIR:-$root/build/bin}
fixtures=${MPIBERT_FIXTURES:-$root/tests/fixtures}
mpiexec=${MPIEXEC:-mpiexec}
# The tools' Python (tools/launch.sh takes the same), which has matplotlib.
py=${MPIBERT_TOOLS_PYTHON:-$root/.venv/bin/python3}
export MPIBERT_TOOLS_PYTHON=$py
model_config=$fixtures/model/config.json
[ -f "$model_config" ] || model_config=$root/configs/small-bert.json
vocab=$root/data_prep/data/bert-base-uncased/vocab.txt
squad=$root/data_prep/data/squad/dev-v1.1.json.gz

for f in "$bin/mpibert" "$bin/mpibert-prep"; do
  [ -x "$f" ] || { echo "FAIL: $f not built"; exit 1; }
done
"$py" -c 'import matplotlib' || { echo "FAIL: $py lacks matplotlib (bash scripts/install-deps.sh, or pip install ./tools)"; exit 1; }

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
step "run 4: 2 ranks, fsdp"
logged "$tmp/run4.log" "${mpi[@]}" "$bin/mpibert" "${train[@]}" --strategy fsdp --output-dir "$tmp/runs/r2-fsdp"

step "tools/compare: the four runs, the real HF Trainer's output_dir and Lightning's CSV log"
out=$tmp/report
hf=$root/tests/peer_runs/hf-trainer
lightning=$root/tests/peer_runs/lightning
set +e
# Given out of order, so the sort and the default baseline (fewest ranks) are exercised.
"$root/tools/compare" "$tmp/runs/r2-zero1" "$tmp/runs/r2-fsdp" "$tmp/runs/r2-ddp" "$tmp/runs/r1-single" "$hf" "$lightning" \
  --ranks "$hf=1" --out "$out" --title "compare test" >"$tmp/compare.out" 2>"$tmp/compare.err"
rc=$?
set -e
dump() {
  echo "---- tools/compare stdout"; cat "$tmp/compare.out"
  echo "---- tools/compare stderr"; cat "$tmp/compare.err"
  echo "---- $out"; ls -l "$out" 2>&1 || true
}
if [ $rc -ne 0 ]; then echo "FAIL: tools/compare exited $rc"; dump; exit 1; fi
cat "$tmp/compare.out"

if ! "$py" - "$tmp/compare.out" "$out" "$tmp/runs" "$hf" "$lightning" <<'EOF'
import csv, json, os, sys
stdout_path, out, runs, hf, lightning = sys.argv[1:]
text = open(stdout_path, encoding="utf-8").read()
failures = []
def check(cond, msg):
    if not cond:
        failures.append(msg)
DASH, MARK = "\u2013", "\u2020"

rows = [l for l in text.splitlines() if l.startswith("|")]
cells = [[c.strip() for c in l.strip().strip("|").split("|")] for l in rows]
header, body = cells[0], [c for c in cells[2:]]
check(len(body) == 6, "expected 6 table rows, found %d" % len(body))
col = {name: header.index(name) for name in header}
for name in ("run", "source", "model", "strategy", "ranks", "samples/s", "samples/s incl. setup", "MFU", "speedup", "efficiency",
             "EM", "F1", "validation loss", "training time", "device", "epochs", "validation loss by epoch",
             "held MiB/rank", "peak MiB/rank"):
    check(name in col, "column %r missing from the header %r" % (name, header))
if failures:
    print("\n".join("FAIL: " + f for f in failures)); sys.exit(1)
row = {r[col["run"]]: r for r in body}
def number(cell):
    return float(cell.rstrip(MARK + "%").replace(",", ""))

got = [(r[col["run"]], r[col["ranks"]], r[col["strategy"]], r[col["source"]]) for r in body]
want = [("hf-trainer", "1", "single", "HF Trainer"), ("lightning", "1", "single", "Lightning"),
        ("r1-single", "1", "single", "mpibert"), ("r2-ddp", "2", "ddp", "mpibert"), ("r2-zero1", "2", "zero1", "mpibert"),
        ("r2-fsdp", "2", "fsdp", "mpibert")]
check(got == want, "rows (run, ranks, strategy, source) %r, expected %r" % (got, want))

def results(name):
    with open(os.path.join(runs, name, "results.json")) as f:
        return json.load(f)
base = results("r1-single")["train_step_samples_per_second"]
MIB = 1024.0 * 1024.0
def evaluations(name):
    lines = [json.loads(l) for l in open(os.path.join(runs, name, "metrics.jsonl")) if l.strip()]
    return [l for l in lines if "eval_loss" in l]
for name in ("r1-single", "r2-ddp", "r2-fsdp", "r2-zero1"):
    r, res = row[name], results(name)
    check(abs(number(r[col["samples/s"]]) - res["train_step_samples_per_second"]) <= 0.006,
          "%s: samples/s %s, results.json says %r" % (name, r[col["samples/s"]], res["train_step_samples_per_second"]))
    check(abs(number(r[col["samples/s incl. setup"]]) - res["train_samples_per_second"]) <= 0.006,
          "%s: samples/s incl. setup %s, results.json says %r" % (name, r[col["samples/s incl. setup"]], res["train_samples_per_second"]))
    expect = res["train_step_samples_per_second"] / base
    check(abs(number(r[col["speedup"]]) - expect) <= 0.0051 and MARK not in r[col["speedup"]],
          "%s: speedup %s, expected %.4f over the steps" % (name, r[col["speedup"]], expect))
    ranks = res["parallel"]["world_size"]
    check(abs(number(r[col["efficiency"]]) - 100 * expect / ranks) <= 0.51, "%s: efficiency %s, expected %.2f%%"
          % (name, r[col["efficiency"]], 100 * expect / ranks))
    check(r[col["F1"]] != DASH and abs(float(r[col["F1"]]) - res["eval_f1"]) <= 0.0051,
          "%s: F1 %s, results.json says %r" % (name, r[col["F1"]], res.get("eval_f1")))
    check(r[col["validation loss"]] != DASH, "%s: validation loss missing" % name)
    # --max-steps 4 --eval-steps 2: evaluations after steps 2 and 4, labelled by the epochs done then.
    want = ", ".join("%s: %.4f" % (("%.2f" % e["epoch"]).rstrip("0").rstrip("."), e["eval_loss"]) for e in evaluations(name))
    check(len(evaluations(name)) == 2 and r[col["validation loss by epoch"]] == want,
          "%s: validation loss by epoch %r, metrics.jsonl gives %r" % (name, r[col["validation loss by epoch"]], want))
    memory = res["parallel"]["memory_per_rank"]
    held = max(m["parameter_bytes"] + m["gradient_bytes"] + m["optimizer_state_bytes"] for m in memory)
    peak = max(m["peak_rss_bytes"] for m in memory)
    check(len(memory) == ranks and abs(number(r[col["held MiB/rank"]]) - held / MIB) <= 0.051,
          "%s: held MiB/rank %s, results.json's largest rank holds %.2f MiB" % (name, r[col["held MiB/rank"]], held / MIB))
    check(r[col["peak MiB/rank"]].endswith(" RSS") and abs(number(r[col["peak MiB/rank"]][:-4]) - peak / MIB) <= 0.51,
          "%s: peak MiB/rank %r, results.json's largest peak RSS is %.1f MiB" % (name, r[col["peak MiB/rank"]], peak / MIB))
    mfu = res["utilization"]["mfu"]
    check(r[col["MFU"]] == "%.1f%%" % (100 * mfu), "%s: MFU %r, results.json's utilization.mfu is %r" % (name, r[col["MFU"]], mfu))
    check(":" in r[col["training time"]] and "s)" in r[col["training time"]],
          "%s: training time %r is not h:mm:ss (seconds)" % (name, r[col["training time"]]))
# A rank of fsdp holds 1/2 of everything, zero1 1/2 of the optimizer state; ddp as one process.
held = {name: number(row[name][col["held MiB/rank"]]) for name in ("r1-single", "r2-ddp", "r2-zero1", "r2-fsdp")}
check(held["r2-ddp"] == held["r1-single"] and held["r2-fsdp"] < held["r2-zero1"] < held["r2-ddp"],
      "held MiB/rank %r: expected fsdp < zero1 < ddp = one process" % held)
check(row["r1-single"][col["speedup"]] == "1.00", "baseline row speedup %r, expected 1.00" % row["r1-single"][col["speedup"]])
check("Baseline: **r1-single**" in text, "no line naming r1-single as the baseline")
check("Speedup =" in text and "efficiency =" in text and "MFU =" in text, "no definition of speedup/efficiency/MFU")

# HF Trainer: its own files' figures; the step throughput and the loss it does not record.
hf_results = json.load(open(os.path.join(hf, "all_results.json")))
r = row["hf-trainer"]
check(r[col["samples/s"]] == DASH, "hf-trainer: samples/s over the steps %r, HF records none" % r[col["samples/s"]])
check(abs(number(r[col["samples/s incl. setup"]]) - hf_results["train_samples_per_second"]) <= 0.006,
      "hf-trainer: samples/s incl. setup %s, all_results.json says %r" % (r[col["samples/s incl. setup"]], hf_results["train_samples_per_second"]))
expect = hf_results["train_samples_per_second"] / results("r1-single")["train_samples_per_second"]
check(r[col["speedup"]].endswith(MARK) and abs(number(r[col["speedup"]]) - expect) <= 0.0051,
      "hf-trainer: speedup %s, expected %.4f%s (over train_runtime, marked)" % (r[col["speedup"]], expect, MARK))
check(abs(float(r[col["EM"]]) - hf_results["eval_exact_match"]) <= 0.0051, "hf-trainer: EM %s, all_results.json says %r"
      % (r[col["EM"]], hf_results["eval_exact_match"]))
check(abs(float(r[col["F1"]]) - hf_results["eval_f1"]) <= 0.0051, "hf-trainer: F1 %s" % r[col["F1"]])
check(r[col["validation loss"]] == DASH, "hf-trainer: validation loss %r, run_qa computes none" % r[col["validation loss"]])
check(r[col["validation loss by epoch"]] == DASH and r[col["held MiB/rank"]] == DASH,
      "hf-trainer: validation loss by epoch %r, held memory %r: HF records neither" % (r[col["validation loss by epoch"]], r[col["held MiB/rank"]]))
check(abs(float(r[col["epochs"]]) - hf_results["epoch"]) <= 0.0006, "hf-trainer: epochs %s" % r[col["epochs"]])
check(r[col["MFU"]] == DASH, "hf-trainer: MFU %r, HF records none" % r[col["MFU"]])

# Lightning: metrics.csv's last validation and ThroughputMonitor's counters; hparams.yaml's devices.
version = os.path.join(lightning, "version_0")
lrows = list(csv.DictReader(open(os.path.join(version, "metrics.csv"))))
def last(name):
    return [float(x[name]) for x in lrows if x.get(name)][-1]
r = row["lightning"]
for column_name, key, tolerance in (("EM", "val_exact_match", 0.0051), ("F1", "val_f1", 0.0051),
                                    ("validation loss", "val_loss", 0.00051)):
    check(abs(float(r[col[column_name]]) - last(key)) <= tolerance,
          "lightning: %s %s, metrics.csv's last %s is %r" % (column_name, r[col[column_name]], key, last(key)))
check(abs(number(r[col["samples/s"]]) - last("train/samples") / last("train/time")) <= 0.006,
      "lightning: samples/s %s, expected train/samples / train/time = %.3f" % (r[col["samples/s"]], last("train/samples") / last("train/time")))
check(r[col["samples/s incl. setup"]] == DASH, "lightning: samples/s incl. setup %r" % r[col["samples/s incl. setup"]])
check(r[col["MFU"]] == DASH, "lightning: MFU %r, Lightning's CSV log records none" % r[col["MFU"]])
check(MARK not in r[col["speedup"]], "lightning: speedup %r should be over the steps" % r[col["speedup"]])
want = ", ".join("step %d: %.4f" % (int(x["step"]), float(x["val_loss"])) for x in lrows if x.get("val_loss"))
check(r[col["validation loss by epoch"]] == want, "lightning: validation loss by epoch %r, expected %r (by step: "
      "Lightning logs an epoch index)" % (r[col["validation loss by epoch"]], want))

for needle in ("`hf-trainer` (HF Trainer): no samples/s over the steps", "`hf-trainer` (HF Trainer): no validation loss",
               "`lightning` (Lightning): no samples/s incl. setup", "ranks 1 as stated with --ranks",
               "`hf-trainer` (HF Trainer): no memory per rank", "`lightning` (Lightning): no memory per rank",
               "`hf-trainer` (HF Trainer): no MFU", "`lightning` (Lightning): no MFU"):
    check(needle in text, "the notes lack %r" % needle)

md_path = os.path.join(out, "comparison.md")
check(os.path.isfile(md_path), "comparison.md missing")
md = open(md_path, encoding="utf-8").read() if os.path.isfile(md_path) else ""
for png in ("loss.png", "scaling.png", "phases.png", "memory.png"):
    p = os.path.join(out, png)
    if not os.path.isfile(p):
        check(False, "%s missing" % png); continue
    data = open(p, "rb").read()
    check(data[:8] == b"\x89PNG\r\n\x1a\n", "%s does not start with the PNG signature" % png)
    check(len(data) > 10 * 1024, "%s is only %d bytes" % (png, len(data)))
    check("](%s)" % png in md, "comparison.md does not link %s" % png)
check("| r2-zero1 " in md or "| r2-zero1" in md, "comparison.md lacks the table")
check("Not recorded" in md, "comparison.md lacks the notes on what sources do not record")
if failures:
    print("\n".join("FAIL: " + f for f in failures)); sys.exit(1)
print("table, sources, speedups, notes, plots and comparison.md: ok")
EOF
then dump; exit 1; fi

step "mpibert's HF-named files, read as an HF Trainer output_dir, give the same figures"
mkdir -p "$tmp/runs/as-hf"
cp "$tmp/runs/r1-single/"{all_results.json,train_results.json,eval_results.json,trainer_state.json} "$tmp/runs/as-hf/"
"$root/tools/compare" "$tmp/runs/r1-single" "$tmp/runs/as-hf" --out "$tmp/report-as-hf" >"$tmp/as-hf.out" 2>&1 || {
  cat "$tmp/as-hf.out"; echo "FAIL: tools/compare on the HF-named copy"; exit 1; }
"$py" - "$tmp/as-hf.out" <<'EOF' || { cat "$tmp/as-hf.out"; exit 1; }
import sys
rows = [[c.strip() for c in l.strip().strip("|").split("|")] for l in open(sys.argv[1]) if l.startswith("|")]
header, body = rows[0], {r[0]: r for r in rows[2:]}
ours, theirs = body["r1-single"], body["as-hf"]
for name in ("samples/s incl. setup", "EM", "F1", "epochs", "training time"):
    i = header.index(name)
    if ours[i] != theirs[i]:
        print("FAIL: %s: %r from results.json, %r from the HF-named files" % (name, ours[i], theirs[i])); sys.exit(1)
if theirs[header.index("source")] != "HF Trainer":
    print("FAIL: the copy was not read as an HF Trainer output_dir"); sys.exit(1)
print("HF-named files: the same training time, samples/s, epochs, EM and F1 as results.json")
EOF

step "an HF output_dir without --ranks (through results/compare, the old command, which execs tools/compare), and a --ranks that names no run"
"$root/results/compare" "$hf" --out "$tmp/report3" >"$tmp/noranks.out" 2>&1 || { cat "$tmp/noranks.out"; echo "FAIL"; exit 1; }
grep -qF "give --ranks hf-trainer=N" "$tmp/noranks.out" || { cat "$tmp/noranks.out"; echo "FAIL: no hint to give --ranks"; exit 1; }
set +e
"$root/tools/compare" "$hf" --ranks "$tmp/nowhere=2" --out "$tmp/report3" >"$tmp/badranks.out" 2>&1
rc=$?
set -e
if [ $rc -ne 1 ] || ! grep -qF "is not one of the runs given" "$tmp/badranks.out"; then
  cat "$tmp/badranks.out"; echo "FAIL: --ranks naming no run: exit $rc, expected 1 with the reason"; exit 1
fi

step "a run directory without results.json"
mkdir -p "$tmp/runs/broken"
cp "$tmp/runs/r1-single/metrics.jsonl" "$tmp/runs/broken/"
set +e
"$root/tools/compare" "$tmp/runs/r1-single" "$tmp/runs/broken" --out "$tmp/report2" >"$tmp/broken.out" 2>&1
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
"$root/tools/compare" "$tmp/runs/broken" --out "$tmp/report2" >"$tmp/broken.out" 2>&1
rc=$?
set -e
if [ $rc -ne 1 ] || ! grep -qF "$tmp/runs/broken" "$tmp/broken.out" || ! grep -q "malformed" "$tmp/broken.out"; then
  echo "FAIL: malformed results.json: exit $rc (expected 1), output should name $tmp/runs/broken:"
  cat "$tmp/broken.out"; exit 1
fi
cat "$tmp/broken.out"
echo "PASS"
