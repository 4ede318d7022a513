#!/usr/bin/env bash
# Makes our reference runs on this machine and the report about them (results/README.md):
# the main job's training (small BERT, bundled sample split by article, 101 steps of global batch
# 32, evaluation at the end) as
#   1 rank x 2 threads (the single-process baseline), 2 ranks x 1 thread ddp, 2 ranks x 1 thread zero1,
# through jobs/local.sh, into results/reference/<run>/ (checkpoints are not committed), then
# results/compare's table and plots. Run it on an otherwise idle machine: it measures speed.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh > /dev/null
source scripts/env.sh
shards=results/main/shards
bash scripts/sample_shards.sh results/main
export DEVICE=cpu RESULTS_DIR=results/reference TRAIN_SHARDS=$shards/train EVAL_SHARDS=$shards/eval
rm -rf results/reference
# The same global batch (32) and schedule everywhere; --padding full so that every rank has the
# same work (dynamic padding would measure load imbalance too).
common=(--padding full --save-total-limit 1)
RUN_NAME=cpu-1rank-2threads THREADS=2 jobs/local.sh baseline --batch-size 32 "${common[@]}"
RUN_NAME=cpu-2ranks-ddp THREADS=1 RANKS=2 jobs/local.sh ddp --batch-size 16 "${common[@]}"
RUN_NAME=cpu-2ranks-zero1 THREADS=1 RANKS=2 jobs/local.sh zero1 --batch-size 16 "${common[@]}"
# Kept: what the reports read (results.json, metrics.jsonl, HF's *_results.json and
# trainer_state.json, the job's files); not the checkpoints, the final model, prediction files or
# TensorBoard events.
find results/reference -maxdepth 2 \( -name 'checkpoint-*' -o -name tensorboard \) -type d -exec rm -rf {} +
find results/reference -maxdepth 2 \( -name '*predictions.json' -o -name model.safetensors -o -name vocab.txt \) -delete
results/compare results/reference/cpu-1rank-2threads results/reference/cpu-2ranks-ddp results/reference/cpu-2ranks-zero1 \
  --baseline results/reference/cpu-1rank-2threads --out results/reference --title "mpibert on $(hostname), CPU" \
  > results/reference/table.md
cat results/reference/table.md
