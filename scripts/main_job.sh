#!/usr/bin/env bash
# The main job on the bundled sample: installs what is missing and builds; splits the bundled
# SQuAD v1.1 dev set by article (40 articles to train on, the last 8 to evaluate), prepares both
# parts on 2 MPI ranks, trains a small BERT from random initialization on 2 MPI ranks (ddp, one
# thread each; configs/main_job.toml), evaluates across both ranks, and prints EM/F1 and where the
# run went.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
source scripts/env.sh

run_dir="results/main"
rm -rf "$run_dir"
mkdir -p "$run_dir/data"
squad=data_prep/data/squad/dev-v1.1.json.gz
build/bin/mpibert-prep split "$squad" --articles 0:-8 --out "$run_dir/data/train.json"
build/bin/mpibert-prep split "$squad" --articles -8:48 --out "$run_dir/data/eval.json"
RANKS=2 jobs/prep_squad.sh "$run_dir/data/train.json" "$run_dir/shards/train" train --log-level warn
RANKS=2 jobs/prep_squad.sh "$run_dir/data/eval.json" "$run_dir/shards/eval" eval --log-level warn
build/bin/mpibert-prep inspect "$run_dir/shards/train" > "$run_dir/prep_stats_train.json"
build/bin/mpibert-prep inspect "$run_dir/shards/eval" > "$run_dir/prep_stats_eval.json"

# --bind-to none: each rank runs a compute thread and a communication thread.
mpirun -n 2 --bind-to none build/bin/mpibert train --config configs/main_job.toml \
  --train-shards "$run_dir/shards/train" --eval-shards "$run_dir/shards/eval" --output-dir "$run_dir/train"
echo "main job: run directory $(pwd)/$run_dir/train (results.json, predictions.json, checkpoints, tensorboard/);" \
     "shards and their statistics in $(pwd)/$run_dir"
