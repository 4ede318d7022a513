#!/usr/bin/env bash
# Makes tests/peer_runs/: what the real HF Trainer and Lightning's Trainer leave behind, for the
# tests of tools/compare (tests/test_compare.sh) and of mpibert's HF-named files
# (tests/test_trainer.cpp). Both fine-tune the fixture's tiny QA model (tests/fixtures/model, HF's
# BertForQuestionAnswering) for 12 steps of batch 8 on articles 2-3 of the bundled SQuAD v1.1 dev
# set and evaluate on article 32, on the CPU, in bench/.venv-hf (requirements.txt):
#   hf-trainer/           run_qa_peer.py train: the output_dir as run_qa.py leaves it, without the
#                         model weights and training_args.bin (a pickle);
#   lightning/version_0/  lightning_peer.py train: the CSVLogger's metrics.csv and hparams.yaml.
# The files are committed; run this again after changing the peers or their pinned versions.
set -euo pipefail
cd "$(dirname "$0")/../.."
peer_python=$(bash bench/hf_peer/setup_venv.sh)
out=tests/peer_runs
tmp=$(mktemp -d "${TMPDIR:-/tmp}/peer_runs.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# Articles by index, as `mpibert-prep split --articles` takes them.
"$peer_python" - data_prep/data/squad/dev-v1.1.json.gz "$tmp" <<'EOF'
import gzip, json, os, sys
source, tmp = sys.argv[1:]
data = json.load(gzip.open(source, "rt", encoding="utf-8"))
for name, articles in (("train", data["data"][2:4]), ("eval", data["data"][32:33])):
    with open(os.path.join(tmp, name + ".json"), "w", encoding="utf-8") as f:
        json.dump({"version": data["version"], "data": articles}, f)
EOF
# The fixture's weights, with the metadata from_pretrained asks of a safetensors file (format: pt).
mkdir -p "$tmp/model"
cp tests/fixtures/model/config.json "$tmp/model/"
"$peer_python" -c 'import sys; from safetensors.torch import load_file, save_file
save_file(load_file(sys.argv[1]), sys.argv[2], metadata={"format": "pt"})' tests/fixtures/model/model.safetensors "$tmp/model/model.safetensors"
common=(--train-file "$tmp/train.json" --eval-file "$tmp/eval.json" --model "$tmp/model"
        --vocab data_prep/data/bert-base-uncased/vocab.txt --max-steps 12 --batch 8 --learning-rate 1e-3
        --warmup-ratio 0.1 --weight-decay 0.01 --max-seq-length 128 --doc-stride 64 --threads 1 --seed 42)
"$peer_python" bench/hf_peer/run_qa_peer.py train "${common[@]}" --output-dir "$tmp/hf" --padding dynamic --logging-steps 2
"$peer_python" bench/hf_peer/lightning_peer.py train "${common[@]}" --output-dir "$tmp/lightning" --val-check-interval 6

rm -rf "$out/hf-trainer" "$out/lightning"
mkdir -p "$out/hf-trainer" "$out/lightning/version_0"
cp "$tmp/hf/"{all_results.json,train_results.json,eval_results.json,trainer_state.json,eval_predictions.json,config.json} \
  "$out/hf-trainer/"
cp "$tmp/lightning/lightning_logs/version_0/"{metrics.csv,hparams.yaml} "$out/lightning/version_0/"
"$peer_python" - > "$out/VERSIONS" <<'EOF'
import lightning, torch, transformers
print("transformers %s, lightning %s, torch %s" % (transformers.__version__, lightning.__version__, torch.__version__))
EOF
echo "peer runs: $(find "$out" -type f | sort | tr '\n' ' ')"
