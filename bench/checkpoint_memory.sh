#!/usr/bin/env bash
# Peak memory of one training step (forward + backward, sequences of 384, every token real) with and
# without activation checkpointing (--gradient-checkpointing), on the CPU, one process per
# configuration (bench_checkpoint_memory: the resident set before the step and its peak), and a
# Markdown table of them. Configurations run one at a time, smallest batch first; from the third
# batch on, one whose peak, extrapolated linearly in the batch from the two before it (same model
# and setting), would pass LIMIT_GB is skipped and its estimate shown instead.
#   bash scripts/build.sh bench_checkpoint_memory && bench/checkpoint_memory.sh
# Settings (environment): MODELS "base large" (bench/bert-MODEL-config.json), BATCHES "1 2 8 32", SEQ 384,
# THREADS 2, LIMIT_GB 14, BENCH build/bin/bench_checkpoint_memory, OUT (also write the table there).
set -euo pipefail
cd "$(dirname "$0")/.."
models=${MODELS:-base large}
batches=${BATCHES:-1 2 8 32}
seq=${SEQ:-384}
threads=${THREADS:-2}
limit_gb=${LIMIT_GB:-14}
bench=${BENCH:-build/bin/bench_checkpoint_memory}
work=$(mktemp -d "${TMPDIR:-/tmp}/checkpoint-memory.XXXXXX")
trap 'rm -rf "$work"' EXIT

# The peak (bytes) a batch would reach: the line through the peaks of two smaller batches.
estimate() {  # JSON_LINE JSON_LINE BATCH
  python3 -c 'import json, sys; a, b = json.loads(sys.argv[1]), json.loads(sys.argv[2]); x = int(sys.argv[3])
slope = (b["peak_rss_bytes"] - a["peak_rss_bytes"]) / (b["batch"] - a["batch"])
print(int(b["peak_rss_bytes"] + slope * (x - b["batch"])))' "$1" "$2" "$3"
}

for model in $models; do
  for checkpointing in "" --gradient-checkpointing; do
    before="" previous=""
    for batch in $batches; do
      label="$model batch $batch ${checkpointing:-(no checkpointing)}"
      if [ -n "$before" ]; then
        expected=$(estimate "$before" "$previous" "$batch")
        if [ "$expected" -gt $((limit_gb * 1024 * 1024 * 1024)) ]; then
          echo "skipped: $label, estimated peak $((expected / 1024 / 1024)) MiB > $limit_gb GiB" >&2
          echo "{\"skipped\": true, \"config\": \"$model\", \"batch\": $batch, \"gradient_checkpointing\": $([ -n "$checkpointing" ] && echo true || echo false), \"estimated_peak_bytes\": $expected}" >> "$work/runs.jsonl"
          continue
        fi
      fi
      echo "running: $label" >&2
      before=$previous
      previous=$("$bench" --config "bench/bert-$model-config.json" --batch "$batch" --seq "$seq" --threads "$threads" $checkpointing)
      echo "$previous" | sed "s|\"config\": \"[^\"]*\"|\"config\": \"$model\"|" >> "$work/runs.jsonl"
    done
  done
done

python3 - "$work/runs.jsonl" "${OUT:-}" <<'PY'
import json, sys
runs = [json.loads(line) for line in open(sys.argv[1])]
mib = 1024 * 1024
rows = ["| model | batch | checkpointing | model RSS MiB | peak RSS MiB | peak - model MiB | step s |",
        "|---|--:|---|--:|--:|--:|--:|"]
key = lambda r: (r["config"], r["batch"], r["gradient_checkpointing"])
for r in sorted(runs, key=key):
    ckpt = "on" if r["gradient_checkpointing"] else "off"
    if r.get("skipped"):
        rows.append(f"| bert-{r['config']} | {r['batch']} | {ckpt} | | not run: estimated {r['estimated_peak_bytes'] / mib:,.0f} | | |")
        continue
    rows.append(f"| bert-{r['config']} | {r['batch']} | {ckpt} | {r['model_rss_bytes'] / mib:,.0f} | {r['peak_rss_bytes'] / mib:,.0f} | "
                f"{(r['peak_rss_bytes'] - r['model_rss_bytes']) / mib:,.0f} | {r['step_seconds']:.1f} |")
table = "\n".join(rows) + "\n"
print(table, end="")
if sys.argv[2]:
    open(sys.argv[2], "w").write(table)
PY
