#!/usr/bin/env bash
# Makes our reference runs on this machine and the report about them (results/README.md):
# the main job's training (small BERT, bundled sample split by article, 135 steps of global batch
# 24 = 0.35 epoch, evaluated every 45 steps) as
#   1 rank x 2 threads (the single-process baseline), then 2 and 3 ranks x 1 thread each under
#   every strategy (ddp, zero1, zero2, fsdp),
# through jobs/local.sh, into results/reference/<run>/ (checkpoints are not committed), then
# results/compare's table and plots. Run it on an otherwise idle machine: it measures speed
# (3 ranks on 2 cores share them: that is in the figures). About 35 minutes on 2 vCPUs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh > /dev/null
source scripts/env.sh
shards=results/main/shards
bash scripts/sample_shards.sh results/main
export DEVICE=cpu RESULTS_DIR=results/reference TRAIN_SHARDS=$shards/train EVAL_SHARDS=$shards/eval
rm -rf results/reference
# The same global batch (24, the users' recipe; 24 = 2 x 12 = 3 x 8) and schedule everywhere;
# --padding full so that every rank has the same work (dynamic padding would measure load
# imbalance too).
common=(--padding full --save-total-limit 1 --eval-steps 45)
runs=(cpu-1rank-2threads)
RUN_NAME=cpu-1rank-2threads THREADS=2 jobs/local.sh baseline --batch-size 24 "${common[@]}"
for ranks in 2 3; do
  for strategy in ddp zero1 zero2 fsdp; do
    name=cpu-${ranks}ranks-$strategy
    RUN_NAME=$name THREADS=1 RANKS=$ranks jobs/local.sh "$strategy" --batch-size $((24 / ranks)) "${common[@]}"
    runs+=("$name")
  done
done
# Kept: what the reports read (results.json, metrics.jsonl, HF's *_results.json and
# trainer_state.json, the job's files); not the checkpoints, the final model (its config files too), prediction files or
# TensorBoard events.
find results/reference -maxdepth 2 \( -name 'checkpoint-*' -o -name tensorboard \) -type d -exec rm -rf {} +
find results/reference -maxdepth 2 \( -name '*predictions.json' -o -name model.safetensors -o -name vocab.txt -o -name config.json -o -name tokenizer_config.json \) -delete
results/compare "${runs[@]/#/results/reference/}" --baseline results/reference/cpu-1rank-2threads \
  --out results/reference --title "mpibert on $(hostname), CPU" > results/reference/table.md
cat results/reference/table.md
