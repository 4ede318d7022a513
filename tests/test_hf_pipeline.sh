#!/usr/bin/env bash
# transformers' pipeline("question-answering") loads mpibert run directories and answers as
# `mpibert predict` does. Each model named (default: bert distilbert), from its small config
# (configs/small-MODEL.json), is trained briefly from random weights on two SQuAD v1.1 dev
# articles prepared with its own kind of tokenizer, then answers 20 questions of another article
# both ways (tests/hf_pipeline_answers.py). BERT and DistilBERT take bert-base-uncased's vocab.txt;
# the other families (and bert-cased: BERT on a cased WordPiece, whose run directory must keep
# do_lower_case: false) the tokenizer fixtures of tests/fixtures/tokenizers, their config's
# vocab_size and pad_token_id set to the tokenizer's. Registered in ctest as model.hf_pipeline and
# model.hf_pipeline.FAMILY.
#   bash tests/test_hf_pipeline.sh [MODEL ...]     MODEL: bert distilbert bert-cased roberta
#                                                  xlm-roberta electra deberta-v2 modernbert
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

# The tokenizer fixture each family's tokenizer stands for.
tokenizer_of() {
  case $1 in
    bert | distilbert) echo "$vocab" ;;
    electra) echo "$root/tests/fixtures/tokenizers/wordpiece-uncased" ;;
    bert-cased) echo "$root/tests/fixtures/tokenizers/wordpiece-cased" ;;
    deberta-v2) echo "$root/tests/fixtures/tokenizers/deberta-v3" ;;
    roberta | xlm-roberta | modernbert) echo "$root/tests/fixtures/tokenizers/$1" ;;
    *) echo "FAIL: no tokenizer for model $1" >&2; exit 1 ;;
  esac
}
# configs/small-MODEL.json with the tokenizer's vocabulary size and padding id.
config_for() {
  local model=${1%-cased} tokenizer=$2 out=$3
  "$py" - "$root/configs/small-$model.json" "$tokenizer" "$out" <<'PY'
import json, os, sys
import transformers
config_path, tokenizer_path, out = sys.argv[1:]
config = json.load(open(config_path))
if os.path.isdir(tokenizer_path):
    tokenizer = transformers.AutoTokenizer.from_pretrained(tokenizer_path)
    config["vocab_size"], config["pad_token_id"] = len(tokenizer), tokenizer.pad_token_id
json.dump(config, open(out, "w"), indent=2)
PY
}

models=("$@")
[ ${#models[@]} -gt 0 ] || models=(bert distilbert)
logged "$tmp/prep.log" "$bin/mpibert-prep" split "$squad" --articles 2:4 --out "$tmp/train.json"
for model in "${models[@]}"; do
  echo "== $model"
  tokenizer=$(tokenizer_of "$model")
  config_for "$model" "$tokenizer" "$tmp/config-$model.json"
  if [ "$tokenizer" = "$vocab" ]; then tokenizer_option=(--vocab "$vocab"); else tokenizer_option=(--tokenizer "$tokenizer"); fi
  logged "$tmp/prep-$model.log" "$bin/mpibert-prep" --input "$tmp/train.json" --out "$tmp/shards-$model" --split train \
    "${tokenizer_option[@]}" --max-seq-length 128 --doc-stride 64 --log-level warn
  logged "$tmp/train-$model.log" "$bin/mpibert" train --model-config "$tmp/config-$model.json" --tokenizer "$tokenizer" \
    --train-shards "$tmp/shards-$model" --output-dir "$tmp/$model" --max-steps 100 --batch-size 8 --learning-rate 1e-3 \
    --threads 2 --log-level warn
  if [ "$model" = bert-cased ]; then  # a cased BERT's run directory stays cased for HF
    "$py" -c 'import json, sys; sys.exit(json.load(open(sys.argv[1]))["do_lower_case"] is not False)' \
      "$tmp/$model/tokenizer_config.json" || { echo "FAIL: $tmp/$model/tokenizer_config.json lost do_lower_case: false"; exit 1; }
  fi
  "$py" tests/hf_pipeline_answers.py "$tmp/$model" --mpibert "$bin/mpibert" --squad "$squad" --articles 32:33 \
    --questions 20 2>"$tmp/pipeline-$model.log" || { cat "$tmp/pipeline-$model.log"; exit 1; }
done
echo "PASS"
