#!/usr/bin/env bash
# Makes our reference runs on this machine and the report about them (results/reference/README.md):
# the main job's training (small BERT, bundled sample split by article, 135 steps of global batch
# 24 = 0.35 epoch, evaluated every 45 steps) as
#   1 rank x 2 threads (the single-process baseline), then 2 and 3 ranks x 1 thread each under
#   every strategy (ddp, zero1, zero2, fsdp),
# through jobs/local.sh, into results/reference/<run>/ (checkpoints are not committed), then
# tools/compare's table and plots. Run it on an otherwise idle machine: it measures speed
# (3 ranks on 2 cores share them: that is in the figures). About 35 minutes on 2 vCPUs.
#   bash tools/reference.sh                      # train, then render
#   bash tools/reference.sh --render-only [DIR]  # render the runs already in DIR (default
#                                                # results/reference) into DIR: seconds, no training
set -euo pipefail
cd "$(dirname "$0")/.."
tools=$PWD/tools
runs=(cpu-1rank-2threads)
for ranks in 2 3; do
  for strategy in ddp zero1 zero2 fsdp; do runs+=("cpu-${ranks}ranks-$strategy"); done
done

# The table (table.md, also on stdout), comparison.md and the plots of the runs in DIR, written
# into DIR; run from inside it, so that the paths they name do not depend on where DIR is. The
# title names the host the baseline ran on, as its results.json records it.
render() {  # DIR
  local host
  host=$(/usr/bin/python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["environment"]["host"])' \
    "$1/cpu-1rank-2threads/results.json")
  (cd "$1" && "$tools/compare" "${runs[@]}" --baseline cpu-1rank-2threads --out . \
    --title "mpibert on $host, CPU" > table.md)
  cat "$1/table.md"
}

if [ "${1:-}" = --render-only ]; then
  render "${2:-results/reference}"
  exit 0
fi

bash scripts/build.sh > /dev/null
source scripts/env.sh
shards=results/main/shards
bash scripts/sample_shards.sh results/main
export DEVICE=cpu RESULTS_DIR=results/reference TRAIN_SHARDS=$shards/train EVAL_SHARDS=$shards/eval
rm -rf results/reference
# The same global batch (24, the users' recipe; 24 = 2 x 12 = 3 x 8) and schedule everywhere;
# --padding full so that every rank has the same work (dynamic padding would measure load
# imbalance too).
common=(--padding full --save-total-limit 1 --eval-steps 45)
for name in "${runs[@]}"; do
  if [ "$name" = cpu-1rank-2threads ]; then
    RUN_NAME=$name THREADS=2 jobs/local.sh baseline --batch-size 24 "${common[@]}"
  else
    ranks=${name#cpu-}; ranks=${ranks%%ranks-*}
    RUN_NAME=$name THREADS=1 RANKS=$ranks jobs/local.sh "${name##*-}" --batch-size $((24 / ranks)) "${common[@]}"
  fi
done
# Kept: what the reports read (results.json, metrics.jsonl, HF's *_results.json and
# trainer_state.json, the job's files); not the checkpoints, the final model (its config files too), prediction files or
# TensorBoard events.
find results/reference -maxdepth 2 \( -name 'checkpoint-*' -o -name tensorboard \) -type d -exec rm -rf {} +
find results/reference -maxdepth 2 \( -name '*predictions.json' -o -name model.safetensors -o -name vocab.txt -o -name config.json -o -name tokenizer_config.json \) -delete
render results/reference
