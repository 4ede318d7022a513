#!/usr/bin/env bash
# Preparation throughput for the bundled dev sets on 1 and 2 ranks (run after scripts/build.sh).
# In-process figures come from build/bin/bench_prep (best of 3, MPI start-up excluded); the last
# lines time the whole `mpirun -n 2 mpibert-prep` command as a user runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
vocab=data_prep/data/bert-base-uncased/vocab.txt
for input in data_prep/data/squad/dev-v1.1.json.gz data_prep/data/squad/dev-v2.0.json.gz; do
  for ranks in 1 2; do
    mpirun -n "$ranks" --bind-to none build/bin/bench_prep --input "$input" --vocab "$vocab" --repeats 3
  done
done
out=$(mktemp -d)
for input in data_prep/data/squad/dev-v1.1.json.gz data_prep/data/squad/dev-v2.0.json.gz; do
  start=$(date +%s.%N)
  mpirun -n 2 --bind-to none build/bin/mpibert-prep --input "$input" --vocab "$vocab" --out "$out/$(basename "$input")" \
    --log-level warn
  end=$(date +%s.%N)
  awk -v name="$(basename "$input")" -v s="$start" -v e="$end" 'BEGIN { printf "%-28s whole command, mpirun -n 2: %.2f s wall\n", name, e - s }'
done
rm -rf "$out"
