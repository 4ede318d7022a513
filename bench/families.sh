#!/usr/bin/env bash
# The encoder families beside bert-base and beside HF's own models: training samples/s of each
# family's base config (bench_train --preset base) on this CPU, fp32, batch 4 at seq 384 on
# SQuAD v1.1 dev features (its first four articles), one process, 2 threads, dropout as the config.
#   mpibert: bench_train --variant dynamic (padded to the batch's longest) and --variant packed;
#   HF:      bench/hf_family_step.py: AutoModelForQuestionAnswering.from_config of the config
#            mpibert builds (bench_train --dump-batches), SDPA attention where the family has it,
#            the same dynamic-padded batches in the same order, the same step (forward, backward,
#            clip 1.0, fused AdamW), on the same torch.
# One set of shards serves every family: bert-base-uncased's WordPiece ids (< 30522) fit each
# family's vocabulary, which is all that throughput needs. Each family's three runs alternate
# (mpibert dynamic, HF, mpibert packed), family after family, ROUNDS times (default 2); the table
# gives the mean over the rounds (the spread in brackets), mpibert over HF and each family over
# bert-base. FAMILIES (default: every --model bench_train --help lists), BATCH (4), STEPS (4
# timed steps after one warm-up step), THREADS (2), DEVICE (cpu, or cuda: both sides on the GPU),
# PRECISION (fp32, or bf16: autocast on both sides), ARTICLES (0:4; a GPU's batches need more:
# (STEPS + 1) x BATCH features).
# BIN_DIR names prebuilt binaries (scripts/gpu_check.sh's bundle; default: build/bin, built
# first), PYTHON a Python with transformers (default: .venv's).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -n "${BIN_DIR:-}" ] || bash scripts/build.sh bench_train mpibert-prep > /dev/null
[ -n "${BIN_DIR:-}" ] || source scripts/env.sh
bin=${BIN_DIR:-build/bin}
python=${PYTHON:-.venv/bin/python3}
batch=${BATCH:-4} steps=${STEPS:-4} threads=${THREADS:-2} device=${DEVICE:-cpu}
precision_options=()
[ "${PRECISION:-fp32}" = fp32 ] || precision_options=(--bf16)
# --model TEXT:{bert,distilbert,...}: the families this binary trains.
families=${FAMILIES:-$("$bin/bench_train" --help | sed -n 's/.*--model[^{]*{\([^}]*\)}.*/\1/p' | tr ',' ' ')}
[ -n "$families" ] || { echo "families: no --model choices in bench_train --help; set FAMILIES" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$bin/mpibert-prep" split data_prep/data/squad/dev-v1.1.json.gz --articles "${ARTICLES:-0:4}" --out "$work/dev4.json" > /dev/null
"$bin/mpibert-prep" --input "$work/dev4.json" --out "$work/shards" --split train \
  --vocab data_prep/data/bert-base-uncased/vocab.txt --log-level warn
records=${RECORDS:-$work/records.jsonl}  # RECORDS: keep the runs' JSON lines there
tag() { sed "s/^{/{\"side\": \"$1\", \"family\": \"$2\", /"; }
common=(--shards "$work/shards" --preset base --batch "$batch" --steps "$steps" --threads "$threads" --device "$device"
        "${precision_options[@]}")
for family in $families; do
  "$bin/bench_train" "${common[@]}" --model "$family" --variant dynamic --dump-batches "$work/$family.json"
done

for round in $(seq "${ROUNDS:-2}"); do
  for family in $families; do
    "$bin/bench_train" "${common[@]}" --model "$family" --variant dynamic --json | tag mpibert "$family" >> "$records"
    OMP_NUM_THREADS=$threads "$python" bench/hf_family_step.py --batches "$work/$family.json" --threads "$threads" \
      --device "$device" "${precision_options[@]}" \
      2> "$work/hf.log" | tag hf "$family" >> "$records" || { cat "$work/hf.log" >&2; exit 1; }
    "$bin/bench_train" "${common[@]}" --model "$family" --variant packed --json | tag mpibert "$family" >> "$records"
  done
  echo "families: round $round done ($(uptime))" >&2
done

"$python" bench/families_report.py "$records"
