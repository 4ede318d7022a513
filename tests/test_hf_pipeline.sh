#!/usr/bin/env bash
# transformers' pipeline("question-answering") loads mpibert run directories and answers as
# `mpibert predict` does: a small BERT and a small DistilBERT (configs/small-*.json) are trained
# briefly from random weights on two SQuAD v1.1 dev articles, then both answer 20 questions of
# another article (tests/hf_pipeline_answers.py). Registered in ctest as model.hf_pipeline.
# Environment (all optional):
#   HF_PYTHON        a Python with transformers (default: the checkout's .venv, where
#                    scripts/install-deps.sh installs the HF peer's release)
#   MPIBERT_BIN_DIR  where mpibert and mpibert-prep are (default: build/bin)
#   KEEP_TMP=1       keep the temporary directory
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
source scripts/env.sh
export OMP_NUM_THREADS=1

bin=${MPIBERT_BIN_DIR:-$root/build/bin}
py=${HF_PYTHON:-$root/.venv/bin/python3}
vocab=$root/data_prep/data/bert-base-uncased/vocab.txt
squad=$root/data_prep/data/squad/dev-v1.1.json.gz
"$py" -c 'import transformers, tokenizers, torch' 2>/dev/null ||
  { echo "FAIL: $py has no transformers: bash scripts/install-deps.sh installs it"; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/test_hf_pipeline.XXXXXX")
if [ "${KEEP_TMP:-0}" = 1 ]; then echo "keeping $tmp"; else trap 'rm -rf "$tmp"' EXIT; fi
logged() {
  local log=$1; shift
  "$@" >"$log" 2>&1 || { echo "FAIL: command failed: $*"; cat "$log"; exit 1; }
}

logged "$tmp/prep.log" "$bin/mpibert-prep" split "$squad" --articles 2:4 --out "$tmp/train.json"
logged "$tmp/prep.log" "$bin/mpibert-prep" --input "$tmp/train.json" --out "$tmp/shards" --split train \
  --vocab "$vocab" --max-seq-length 128 --doc-stride 64 --log-level warn
for model in bert distilbert; do
  echo "== $model"
  logged "$tmp/train-$model.log" "$bin/mpibert" train --model-config "configs/small-$model.json" --vocab "$vocab" \
    --train-shards "$tmp/shards" --output-dir "$tmp/$model" --max-steps 100 --batch-size 8 --learning-rate 1e-3 \
    --threads 2 --log-level warn
  "$py" tests/hf_pipeline_answers.py "$tmp/$model" --mpibert "$bin/mpibert" --squad "$squad" --articles 32:33 \
    --questions 20 2>"$tmp/pipeline-$model.log" || { cat "$tmp/pipeline-$model.log"; exit 1; }
done
echo "PASS"
