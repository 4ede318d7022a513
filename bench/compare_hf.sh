#!/usr/bin/env bash
# mpibert beside HF's Trainer on this machine: training samples/s and MFU at seq 384 on SQuAD v1.1
# dev, small config (batch 32) and bert-base (batch 4, as the issue measured it), 1 and 2 threads,
# fp32 and bf16 (autocast on both sides), one process each, dropout 0.1, random weights; then the
# feature counts of both pipelines on dev-v1.1 and dev-v2.0.
#   mpibert: bench_train (full padding, dynamic padding, dynamic + group_by_length, packed);
#   HF:      bench/hf_peer/run_qa_peer.py throughput: Trainer.train() as run_qa runs it (padded
#            to 384), with DataCollatorWithPadding, and with it + group_by_length; --bf16 is
#            TrainingArguments(bf16=True); same torch 2.11.0.
# The two sides alternate, configuration by configuration, ROUNDS times (default 2); the tables
# give each side's mean over the rounds (and the spread), the ratio of the best variants, and MFU
# against the square-GEMM rate bench_train measures per thread count and precision. Run it on an
# otherwise idle machine. STEPS_SMALL / STEPS_BASE: timed optimizer steps after one warm-up step;
# PRESETS (default "small base"), THREADS (default "1 2") and PRECISIONS (default "fp32 bf16";
# bf16 on a CPU without bf16 instructions is emulated, and slow) restrict the configurations.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh > /dev/null
source scripts/env.sh
peer_python=$(bash bench/hf_peer/setup_venv.sh)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
vocab=data_prep/data/bert-base-uncased/vocab.txt
v1=data_prep/data/squad/dev-v1.1.json.gz
v2=data_prep/data/squad/dev-v2.0.json.gz
prep() {  # prep FILE SPLIT OUT
  mpirun -n 2 --bind-to none build/bin/mpibert-prep --input "$1" --vocab "$vocab" --split "$2" --out "$3" --log-level warn
}
prep "$v1" train "$work/v1-train"
records="$work/throughput.jsonl"
tag() { sed "s/^{/{\"side\": \"$1\", \"preset\": \"$2\", /"; }

for round in $(seq "${ROUNDS:-2}"); do
  for preset in ${PRESETS:-small base}; do
    case $preset in
      small) config=configs/small-bert.json batch=32 steps=${STEPS_SMALL:-10} ;;
      base) config=bench/bert-base-config.json batch=4 steps=${STEPS_BASE:-8} ;;
      *) echo "compare_hf: unknown preset $preset" >&2; exit 2 ;;
    esac
    for threads in ${THREADS:-1 2}; do
      export OMP_NUM_THREADS=$threads
      for precision in ${PRECISIONS:-fp32 bf16}; do
        bf16=()
        if [ "$precision" = bf16 ]; then bf16=(--bf16); fi
        for variant in full dynamic grouped packed; do
          build/bin/bench_train --shards "$work/v1-train" --preset "$preset" --batch "$batch" --steps "$steps" \
            --threads "$threads" --variant "$variant" "${bf16[@]}" --json | tag mpibert "$preset" >> "$records"
          case $variant in
            full) padding=(--padding full) ;;
            dynamic) padding=(--padding dynamic) ;;
            grouped) padding=(--padding dynamic --group-by-length) ;;
            *) continue ;;  # HF's Trainer has no packed batches
          esac
          "$peer_python" bench/hf_peer/run_qa_peer.py throughput --train-file "$v1" --vocab "$vocab" --config "$config" \
            --batch "$batch" --steps "$steps" --threads "$threads" --scratch "$work/trainer" "${padding[@]}" "${bf16[@]}" \
            2> "$work/peer.log" | tail -1 | tag hf "$preset" >> "$records" || { cat "$work/peer.log" >&2; exit 1; }
        done
      done
    done
  done
  echo "compare_hf: round $round done" >&2
done
unset OMP_NUM_THREADS

counts="$work/features.jsonl"
for file in "$v1" "$v2"; do
  name=$(basename "$file" .json.gz)
  for split in train eval; do
    prep "$file" "$split" "$work/$name-$split"
    build/bin/mpibert-prep inspect "$work/$name-$split" |
      python3 -c "import json,sys; d=json.load(sys.stdin); print(json.dumps({'side':'mpibert','file':'$name','split':'$split','features':d['features'],'examples':d['examples'],'with_answer':d.get('features_with_answer')}))" >> "$counts"
  done
  "$peer_python" bench/hf_peer/run_qa_peer.py features --file "$file" --vocab "$vocab" 2> /dev/null |
    python3 -c "import json,sys; d=json.load(sys.stdin); print(json.dumps({'side':'hf','file':'$name','train':d['train_features'],'eval':d['eval_features'],'examples':d['examples'],'with_answer':d['train_features_with_answer']}))" >> "$counts"
done
python3 bench/hf_peer/report.py "$records" "$counts"
