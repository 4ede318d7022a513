#!/usr/bin/env bash
# The main job on the bundled sample: installs what is missing and builds; splits the bundled
# SQuAD v1.1 dev set by article (40 articles to train on, the last 8 to evaluate), prepares both
# parts on 2 MPI ranks, trains a small BERT from random initialization on 2 MPI ranks (ddp, one
# thread each; configs/main_job.toml), evaluates across both ranks, and prints EM/F1 and where the
# run went.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh mpibert mpibert-prep
source scripts/env.sh

run_dir="results/main"
rm -rf "$run_dir"
bash scripts/sample_shards.sh "$run_dir"

# --bind-to none: each rank runs a compute thread and a communication thread.
mpirun -n 2 --bind-to none build/bin/mpibert train --config configs/main_job.toml \
  --train-shards "$run_dir/shards/train" --eval-shards "$run_dir/shards/eval" --output-dir "$run_dir/train"
echo "main job: run directory $(pwd)/$run_dir/train (results.json, predictions.json, checkpoints, tensorboard/);" \
     "shards and their statistics in $(pwd)/$run_dir"
