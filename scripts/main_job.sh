#!/usr/bin/env bash
# The main job on the bundled sample: installs what is missing, builds, prepares the bundled SQuAD
# v1.1 dev set on 2 MPI ranks, and prints the shard statistics and where they went.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
source scripts/env.sh

run_dir="results/main"
mkdir -p "$run_dir"
RANKS=2 jobs/prep_squad.sh data_prep/data/squad/dev-v1.1.json.gz "$run_dir/shards" eval --overwrite
build/bin/mpibert-prep inspect "$run_dir/shards" | tee "$run_dir/prep_stats.json"
echo "main job: shards and manifest in $(pwd)/$run_dir/shards, statistics in $(pwd)/$run_dir/prep_stats.json"
