#!/usr/bin/env bash
# A real pretrained BERT fine-tuned by mpibert and by HF's Trainer from the same weights with the
# same settings (configs/pretrained_minilm.toml: global batch 32, 150 steps, lr 1e-4, warmup 10%,
# weight decay 0.01, dynamic padding + group_by_length, seq 384 / stride 128) on the bundled sample
# (the first 40 articles of SQuAD v1.1 dev), both evaluated on its last 8 articles, for each seed
# of SEEDS (default "42 43 44"; the seed draws the QA head, the data order and dropout):
#   mpibert: scripts/pretrained_job.sh --seed S, 2 MPI ranks x 1 thread x batch 16;
#   HF:      bench/hf_peer/run_qa_peer.py train --seed S, 1 process x 2 threads x batch 32.
# Runs go to results/pretrained/{mpibert,hf-trainer}-minilm-seedS; tools/compare writes the
# table and plots of every run there (earlier seeds included) to results/pretrained/, and the last
# lines give each side's mean F1. Runs one after the other; on an otherwise idle machine the times
# compare.
set -euo pipefail
cd "$(dirname "$0")/.."
out=results/pretrained
peer_python=$(bash bench/hf_peer/setup_venv.sh)
model=$(bash scripts/install-pretrained.sh)
for seed in ${SEEDS:-42 43 44}; do
  RUN_DIR=$out/mpibert-minilm-seed$seed bash scripts/pretrained_job.sh --seed "$seed"
  rm -rf "$out/hf-trainer-minilm-seed$seed"
  "$peer_python" bench/hf_peer/run_qa_peer.py train --model "$model" \
    --train-file results/main/data/train.json --eval-file results/main/data/eval.json \
    --output-dir "$out/hf-trainer-minilm-seed$seed" --max-steps 150 --batch 32 --learning-rate 1e-4 \
    --warmup-ratio 0.1 --weight-decay 0.01 --seed "$seed" --padding dynamic --group-by-length --threads 2
done
runs=()
for run in "$out"/hf-trainer-minilm-seed*/; do
  seed=${run%/}
  seed=${seed##*-seed}
  runs+=("$out/hf-trainer-minilm-seed$seed" "$out/mpibert-minilm-seed$seed")
done
stated=()  # HF's files do not record the number of processes: one each here
for run in "${runs[@]}"; do [[ $run == *hf-trainer* ]] && stated+=(--ranks "$run=1"); done
tools/compare "${runs[@]}" "${stated[@]}" --baseline "${runs[0]}" --out "$out" \
  --title "all-MiniLM-L6-v2 fine-tuned on the bundled sample: HF Trainer and mpibert" > "$out/table.md"
python3 - "${runs[@]}" >> "$out/table.md" <<'PY'
import json, os, statistics, sys
sides = {}
for run in sys.argv[1:]:
    # mpibert's results.json; HF's all_results.json (the peer wrote results.json before it left run_qa's layout)
    r = json.load(open(run + "/results.json" if os.path.exists(run + "/results.json") else run + "/all_results.json"))
    sides.setdefault("HF Trainer" if "hf-trainer" in run else "mpibert", []).append((r["eval_exact_match"], r["eval_f1"]))
print()
for side, scores in sides.items():
    em, f1 = [s[0] for s in scores], [s[1] for s in scores]
    sd = statistics.stdev(f1) if len(f1) > 1 else 0.0
    print("- %s over %d seeds: EM %.2f, F1 %.2f (sd %.2f; %s)" % (side, len(f1), statistics.mean(em), statistics.mean(f1), sd,
                                                             ", ".join("%.2f" % f for f in f1)))
PY
cat "$out/table.md"
# Kept: what the reports read and the answers; not the checkpoints, saved models, n-best lists or
# TensorBoard events.
find "$out" -maxdepth 2 \( -name 'checkpoint-*' -o -name tensorboard -o -name model -o -name predict \) -type d -exec rm -rf {} +
find "$out" -maxdepth 2 \( -name '*nbest_predictions.json' -o -name model.safetensors -o -name training_args.bin \
  -o -name vocab.txt \) -delete
