#!/usr/bin/env bash
# Memory per rank by strategy: `mpibert train` on bert-base (random weights, bench/bert-base-config.json)
# for a few steps on 1, 2 and 3 ranks x {ddp, zero1, zero2, fsdp}, and a Markdown table of what each
# run's results.json reports per rank (parallel.memory_per_rank: bytes of parameters, gradients and
# optimizer state held between steps, measured from the storage allocated; and the peak resident
# set) beside the bytes per parameter each strategy is expected to hold:
#   ddp 4 + 4 + 8 = 16;  zero1 4 + 4 + 8/N (+ 4/N for the reduced gradient slices);
#   zero2 4 + 4/N + 8/N;  fsdp (4 + 4 + 8)/N between steps (+ the units in flight during a step).
#   bench/memory_by_strategy.sh            # about 10 minutes on 2 cores
# Settings (environment): RANKS "1 2 3", STRATEGIES "ddp zero1 zero2 fsdp", STEPS 2, BATCH 2 (per
# rank, padded to 384), WORK build/bench-memory, MPIBERT build/bin/mpibert (copied into WORK first),
# OUT (also write the table there: a file, or a folder for OUT/bert-base.md).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
ranks_list=${RANKS:-1 2 3}
strategies=${STRATEGIES:-ddp zero1 zero2 fsdp}
steps=${STEPS:-2}
batch=${BATCH:-2}
work=${WORK:-build/bench-memory}
mkdir -p "$work/runs"
cp "${MPIBERT:-build/bin/mpibert}" "$work/mpibert"
bash scripts/sample_shards.sh "$work" > /dev/null
for ranks in $ranks_list; do
  for strategy in $strategies; do
    [ "$ranks" = 1 ] && [ "$strategy" != ddp ] && continue  # one process: no strategy
    out=$work/runs/$strategy-$ranks
    rm -rf "$out"
    mpirun -n "$ranks" --oversubscribe --bind-to none "$work/mpibert" train --model-config bench/bert-base-config.json \
      --vocab data_prep/data/bert-base-uncased/vocab.txt --train-shards "$work/shards/train" --output-dir "$out" \
      --threads 1 --padding full --batch-size "$batch" --max-steps "$steps" --strategy "$strategy" --save-steps 0 \
      --log-level warn > "$out.log" 2>&1 || { echo "run $strategy on $ranks ranks failed: $out.log" >&2; tail -20 "$out.log" >&2; exit 1; }
  done
done
python3 - "$work/runs" "$ranks_list" "$strategies" "${OUT:-}" <<'PY'
import json, os, sys
runs, ranks_list, strategies, out = sys.argv[1], sys.argv[2].split(), sys.argv[3].split(), sys.argv[4]
mib = 1024 * 1024
rows = ["| strategy | ranks | parameters | params MiB | grads MiB | optimizer MiB | held MiB | bytes/param measured | expected | peak RSS MiB (max over ranks) |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
def expected(strategy, n):
    return {"ddp": 16, "zero1": 8 + 8 / n + 4 / n, "zero2": 4 + 12 / n, "fsdp": 16 / n}[strategy]
for ranks in map(int, ranks_list):
    for strategy in strategies:
        path = os.path.join(runs, f"{strategy}-{ranks}", "results.json")
        if not os.path.exists(path):
            continue
        r = json.load(open(path))
        memory = r["parallel"]["memory_per_rank"]
        held = max(m["steady_state_bytes"] for m in memory)
        first = memory[0]
        # AdamW keeps 8 bytes per parameter, each one on exactly one rank when sharded.
        sharded = ranks > 1 and strategy != "ddp"
        count = (sum(m["optimizer_state_bytes"] for m in memory) if sharded else first["optimizer_state_bytes"]) // 8
        label = strategy if ranks > 1 else "one process"
        rows.append(f"| {label} | {ranks} | {count:,} | {first['parameter_bytes'] / mib:.1f} | {first['gradient_bytes'] / mib:.1f} | "
                    f"{first['optimizer_state_bytes'] / mib:.1f} | {held / mib:.1f} | {held / count:.2f} | "
                    f"{expected(strategy if ranks > 1 else 'ddp', ranks):.2f} | {max(m['peak_rss_bytes'] for m in memory) / mib:.0f} |")
table = "\n".join(rows) + "\n"
print(table, end="")
if out:
    if os.path.isdir(out):
        out = os.path.join(out, "bert-base.md")
    with open(out, "w") as f:
        f.write(table)
PY
