#!/usr/bin/env bash
# Two builds of mpibert, the same runs: every strategy on 2 and 3 ranks, fixed seed, dropout on,
# gradient accumulation, a checkpoint mid-run and one at the end; then every checkpoint file of
# one build compared byte for byte with the other's. For a change that must not move a single
# reduction (a rebuild of the parallel layer): the same collectives in the same order give the
# same bytes on the same machine. Timings (results.json) are not compared.
#   bench/byte_identity.sh BEFORE_BIN_DIR AFTER_BIN_DIR [WORK_DIR]
# BIN_DIR holds mpibert and mpibert-prep (e.g. a copy of an older build/bin). Exits non-zero on
# the first difference, naming the run and the file.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
before=${1:?usage: bench/byte_identity.sh BEFORE_BIN_DIR AFTER_BIN_DIR [WORK_DIR]}
after=${2:?usage: bench/byte_identity.sh BEFORE_BIN_DIR AFTER_BIN_DIR [WORK_DIR]}
work=${3:-$(mktemp -d)}
mkdir -p "$work"

# Six articles of the bundled dev set, prepared once by the second build's mpibert-prep.
if [ ! -f "$work/shards/manifest.json" ]; then
  "$after/mpibert-prep" split data_prep/data/squad/dev-v1.1.json.gz --articles 0:6 --out "$work/train.json"
  "$after/mpibert-prep" --input "$work/train.json" --vocab data_prep/data/bert-base-uncased/vocab.txt \
    --out "$work/shards" --split train --log-level warn
fi

# strategy name, then its options beside the common ones
runs=(
  "ddp-sparse|--strategy ddp"
  "ddp-dense|--strategy ddp --embedding-exchange dense"
  "ddp-bf16|--strategy ddp --reduce-dtype bf16"
  "zero1|--strategy zero1"
  "zero2|--strategy zero2"
  "fsdp|--strategy fsdp"
  "fsdp-bf16|--strategy fsdp --reduce-dtype bf16 --param-dtype bf16"
  "fsdp-kept|--strategy fsdp --keep-gathered-for-backward"
  "hsdp|--strategy hsdp --shard-group-size 1"
)
status=0
for ranks in 2 3; do
  for entry in "${runs[@]}"; do
    name=${entry%%|*} options=${entry#*|}
    for build in before after; do
      bin=$before
      [ $build = after ] && bin=$after
      out=$work/$build/$name-$ranks
      rm -rf "$out"
      mkdir -p "$work/$build"
      # shellcheck disable=SC2086
      timeout -k 10 600 mpirun -n "$ranks" --oversubscribe --bind-to none "$bin/mpibert" train \
        --model-config configs/small-bert.json --vocab data_prep/data/bert-base-uncased/vocab.txt \
        --train-shards "$work/shards" --output-dir "$out" --threads 1 --seed 7 --batch-size 4 \
        --gradient-accumulation 2 --max-steps 6 --save-steps 3 --save-total-limit 0 --learning-rate 0.001 \
        --warmup-ratio 0.2 --weight-decay 0.01 --logging-steps 3 --report-to none --log-level warn $options \
        > "$out.log" 2>&1 || { echo "byte_identity: $build $name on $ranks ranks failed: $out.log" >&2; tail -5 "$out.log" >&2; exit 1; }
    done
    differ=0 files=0
    for checkpoint in "$work/before/$name-$ranks"/checkpoint-*; do
      for file in "$checkpoint"/*; do
        other=$work/after/$name-$ranks/$(basename "$checkpoint")/$(basename "$file")
        files=$((files + 1))
        if ! cmp -s "$file" "$other"; then
          echo "byte_identity: $name on $ranks ranks: $(basename "$checkpoint")/$(basename "$file") differs" >&2
          differ=1
        fi
      done
    done
    [ "$files" -gt 0 ] || { echo "byte_identity: $name on $ranks ranks wrote no checkpoint" >&2; exit 1; }
    if [ $differ = 0 ]; then echo "$name on $ranks ranks: $files checkpoint files byte-identical"; else status=1; fi
  done
done
exit $status
