#!/usr/bin/env bash
# Training samples/s at seq 384 on the bundled SQuAD v1.1 dev features: full padding, dynamic
# padding, and dynamic padding with group_by_length; small config, bert-base and distilbert-base.
# Run after scripts/build.sh. STEPS_SMALL / STEPS_BASE set the timed steps.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
shards=$(mktemp -d)
trap 'rm -rf "$shards"' EXIT
mpirun -n 2 --bind-to none build/bin/mpibert-prep --input data_prep/data/squad/dev-v1.1.json.gz \
  --vocab data_prep/data/bert-base-uncased/vocab.txt --out "$shards/dev" --split train --log-level warn
build/bin/bench_train --shards "$shards/dev" --preset small --steps "${STEPS_SMALL:-30}" --threads 2
build/bin/bench_train --shards "$shards/dev" --preset base --steps "${STEPS_BASE:-4}" --threads 2
build/bin/bench_train --shards "$shards/dev" --model distilbert --preset base --steps "${STEPS_BASE:-4}" --threads 2
