#!/usr/bin/env bash
# transformers' pipeline("question-answering") loads mpibert run directories and answers as
# `mpibert predict` does. Each model named (default: bert distilbert), from its small config
# (configs/small-MODEL.json), is trained briefly from random weights on two SQuAD v1.1 dev
# articles prepared with its own kind of tokenizer, then answers 20 questions of another article
# both ways (tests/hf_pipeline_answers.py). BERT and DistilBERT take bert-base-uncased's vocab.txt;
# the other families (and bert-cased: BERT on a cased WordPiece, whose run directory must keep
# do_lower_case: false) the tokenizer fixtures of tests/fixtures/tokenizers, their config's
# vocab_size and pad_token_id set to the tokenizer's. roberta-file: RoBERTa trained with a lone
# tokenizer.json (--tokenizer FILE.json, its ByteLevel add_prefix_space true, which RoBERTa's class
# would turn false); the run resumes with it, and the run directory's tokenizer gives the file's
# ids in transformers and in mpibert. Registered in ctest as model.hf_pipeline and
# model.hf_pipeline.FAMILY.
#   bash tests/test_hf_pipeline.sh [MODEL ...]     MODEL: bert distilbert bert-cased roberta
#                                                  roberta-file xlm-roberta electra deberta-v2 modernbert
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
# Found, not imported: importing them costs seconds, which the helpers below pay once each.
"$py" -c 'import importlib.util as u, sys; sys.exit(any(u.find_spec(m) is None for m in ("transformers", "tokenizers", "torch")))' 2>/dev/null ||
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
    roberta-file) echo "$tmp/roberta-file.json" ;;
    *) echo "FAIL: no tokenizer for model $1" >&2; exit 1 ;;
  esac
}
# configs/small-MODEL.json with the tokenizer's vocabulary size and padding id.
config_for() {
  local model=${1%-cased} tokenizer=$2 out=$3
  model=${model%-file}
  "$py" - "$root/configs/small-$model.json" "$tokenizer" "$out" <<'PY'
import json, os, sys
import transformers
config_path, tokenizer_path, out = sys.argv[1:]
config = json.load(open(config_path))
if os.path.isdir(tokenizer_path):
    tokenizer = transformers.AutoTokenizer.from_pretrained(tokenizer_path)
    config["vocab_size"], config["pad_token_id"] = len(tokenizer), tokenizer.pad_token_id
elif tokenizer_path.endswith(".json"):
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_file=tokenizer_path)
    config["vocab_size"], config["pad_token_id"] = len(tokenizer), tokenizer.convert_tokens_to_ids("<pad>")
json.dump(config, open(out, "w"), indent=2)
PY
}

models=("$@")
[ ${#models[@]} -gt 0 ] || models=(bert distilbert)
# The lone tokenizer.json: RoBERTa's fixture with add_prefix_space true in its pre-tokenizer.
"$py" - "$root/tests/fixtures/tokenizers/roberta/tokenizer.json" "$tmp/roberta-file.json" <<'PY'
import json, sys
tokenizer = json.load(open(sys.argv[1]))
tokenizer["pre_tokenizer"]["add_prefix_space"] = True
json.dump(tokenizer, open(sys.argv[2], "w"))
PY
# Run directory RUN's tokenizer, in transformers (AutoTokenizer) and in mpibert (tokenize), gives
# the lone FILE's ids (tokenizers' Tokenizer.from_file, as a bare file is read) on the dev texts.
same_ids_as_file() {
  local run=$1 file=$2
  "$py" - "$run" "$file" "$squad" "$bin/mpibert" <<'PY' || { echo "FAIL: $run's tokenizer is not $file's"; exit 1; }
import gzip, json, subprocess, sys
import tokenizers, transformers
run, file, squad, mpibert = sys.argv[1:]
texts = [p["context"] for a in json.load(gzip.open(squad, "rt"))["data"][:3] for p in a["paragraphs"]][:40]
texts += [" leading space", "  two", "word"]
want = [tokenizers.Tokenizer.from_file(file).encode(t, add_special_tokens=False).ids for t in texts]
hf = transformers.AutoTokenizer.from_pretrained(run)
got_hf = [hf(t, add_special_tokens=False)["input_ids"] for t in texts]
out = subprocess.run([mpibert, "tokenize", "--tokenizer", run], input="\n".join(texts) + "\n", text=True,
                     capture_output=True, check=True).stdout
got_mpibert = [json.loads(line)["ids"] for line in out.splitlines()]
bad = [i for i in range(len(texts)) if not (want[i] == got_hf[i] == got_mpibert[i])]
if bad:
    i = bad[0]
    sys.exit("%d of %d texts differ; first %r: file %s, transformers %s, mpibert %s"
             % (len(bad), len(texts), texts[i][:60], want[i][:12], got_hf[i][:12], got_mpibert[i][:12]))
print("run directory tokenizer: %d texts as the lone file" % len(texts))
PY
}
logged "$tmp/prep.log" "$bin/mpibert-prep" split "$squad" --articles 2:4 --out "$tmp/train.json"
for model in "${models[@]}"; do
  echo "== $model"
  tokenizer=$(tokenizer_of "$model")
  config_for "$model" "$tokenizer" "$tmp/config-$model.json"
  if [ "$tokenizer" = "$vocab" ]; then tokenizer_option=(--vocab "$vocab"); else tokenizer_option=(--tokenizer "$tokenizer"); fi
  logged "$tmp/prep-$model.log" "$bin/mpibert-prep" --input "$tmp/train.json" --out "$tmp/shards-$model" --split train \
    "${tokenizer_option[@]}" --max-seq-length 128 --doc-stride 64 --log-level warn
  steps=(--max-steps 100)
  [ "$model" != roberta-file ] || steps=(--max-steps 40 --save-steps 20)  # then resumed to 50
  logged "$tmp/train-$model.log" "$bin/mpibert" train --model-config "$tmp/config-$model.json" --tokenizer "$tokenizer" \
    --train-shards "$tmp/shards-$model" --output-dir "$tmp/$model" "${steps[@]}" --batch-size 8 --learning-rate 1e-3 \
    --threads 2 --log-level warn
  if [ "$model" = roberta-file ]; then  # resumed with the same file, and the run directory tokenizes as the file
    logged "$tmp/resume-$model.log" "$bin/mpibert" train --model-config "$tmp/config-$model.json" --tokenizer "$tokenizer" \
      --train-shards "$tmp/shards-$model" --output-dir "$tmp/$model" --max-steps 50 --save-steps 20 --batch-size 8 \
      --learning-rate 1e-3 --threads 2 --log-level warn --resume auto
    same_ids_as_file "$tmp/$model" "$tokenizer"
  fi
  if [ "$model" = bert-cased ]; then  # a cased BERT's run directory stays cased for HF
    "$py" -c 'import json, sys; sys.exit(json.load(open(sys.argv[1]))["do_lower_case"] is not False)' \
      "$tmp/$model/tokenizer_config.json" || { echo "FAIL: $tmp/$model/tokenizer_config.json lost do_lower_case: false"; exit 1; }
  fi
  "$py" tests/hf_pipeline_answers.py "$tmp/$model" --mpibert "$bin/mpibert" --squad "$squad" --articles 32:33 \
    --questions 20 2>"$tmp/pipeline-$model.log" || { cat "$tmp/pipeline-$model.log"; exit 1; }
done
echo "PASS"
