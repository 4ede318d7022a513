#!/usr/bin/env bash
# Reading SQuAD from each format mpibert-prep takes, and the whole preparation from it, on the
# bundled dev-v1.1 (all 48 articles) written by tests/write_squad_formats.py as nested JSON (the
# bundled file's own layout), flat JSON, JSON Lines and Parquet (the Hub's layout, row groups of
# 100 questions). build/bin/bench_prep, best of 3 each, one rank, the formats alternating in each
# of 2 rounds (speeds here vary ±10-20%: compare only side by side). Needs the .venv's pyarrow.
#   bash bench/prep_formats.sh        (after scripts/build.sh bench_prep)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
vocab=data_prep/data/bert-base-uncased/vocab.txt
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
.venv/bin/python3 tests/write_squad_formats.py data_prep/data/squad/dev-v1.1.json.gz "$work" --articles 48 --only-formats
gzip -9 -k -n "$work/good/nested.json"
formats=(nested.json nested.json.gz flat.json lines.jsonl lines.jsonl.gz squad.parquet)
for round in 1 2; do
  echo "round $round"
  for format in "${formats[@]}"; do
    mpirun -n 1 --bind-to none build/bin/bench_prep --input "$work/good/$format" --vocab "$vocab" --repeats 3 --read-only
  done
  for format in "${formats[@]}"; do
    mpirun -n 1 --bind-to none build/bin/bench_prep --input "$work/good/$format" --vocab "$vocab" --repeats 3
  done
done
