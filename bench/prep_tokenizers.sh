#!/usr/bin/env bash
# Preparation with each kind of tokenizer (tests/fixtures/tokenizers: bert-base-uncased's
# WordPiece through --vocab and through its directory, RoBERTa's byte-level BPE, ModernBERT's
# BPE, DeBERTa-v3's SentencePiece Unigram, XLM-R's SentencePiece BPE) on the bundled dev-v1.1,
# one rank, beside HF's own: run_qa's prepare_train_features through datasets.map(batched=True) in
# one process, its tokenizer on one core (RAYON_NUM_THREADS=1). mpibert's side is build/bin/bench_prep
# (whole preparation, shards written, best of 3); HF's builds the features in memory (best of 3).
# The two alternate, tokenizer by tokenizer. Needs `datasets` in .venv
# (.venv/bin/python -m pip install datasets "huggingface-hub<1.0").
#   bench/prep_tokenizers.sh [INPUT]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
input=${1:-data_prep/data/squad/dev-v1.1.json.gz}
fixtures=tests/fixtures/tokenizers
.venv/bin/python -c "import datasets" 2> /dev/null ||
  { echo "bench/prep_tokenizers.sh: needs datasets in .venv (.venv/bin/python -m pip install datasets 'huggingface-hub<1.0')" >&2; exit 1; }
export RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS=1
echo "mpibert --vocab (bert-base-uncased's vocab.txt)"
mpirun -n 1 --bind-to none build/bin/bench_prep --input "$input" --vocab data_prep/data/bert-base-uncased/vocab.txt --repeats 3
for name in wordpiece-uncased roberta modernbert deberta-v3 xlm-roberta; do
  echo "mpibert --tokenizer $fixtures/$name"
  mpirun -n 1 --bind-to none build/bin/bench_prep --input "$input" --tokenizer "$fixtures/$name" --repeats 3
  .venv/bin/python bench/hf_peer/prepare_features.py "$input" "$fixtures/$name" 3 2> /dev/null
done
