#!/usr/bin/env bash
# mpibert's strategies against PyTorch's own DDP and FSDP2 (c10d over gloo; bench/ddp_peer/), side
# by side on the test hosts (tests/cluster/hosts.sh: network namespaces, one rank per host, TCP
# between them, each host's link shaped to RATE). The small BERT of configs/small-bert.json, batch
# 8 per rank at full padding (384 tokens), one thread per rank; the global samples/s over steps
# 3-12 of each run. Every variant runs once per round, the rounds alternate the order.
#   sudo bash bench/ddp_peers.sh [OUT_DIR]      # default results/ddp_peers/DATE
# Environment: RATES (default "unlimited 1gbit 100mbit"), HOSTS (default "2 3"), ROUNDS (2),
# VARIANTS (default: every mpibert strategy below, then torch-ddp torch-fsdp2; also
# mpibert-fsdp-kept and torch-fsdp2-kept, the gathered parameters kept for backward), STEPS (12),
# MODEL_CONFIG (default configs/small-bert.json; bert-base: bench/bert-base-config.json),
# BATCH (8, per rank).
# Prints a Markdown table (one row per variant, a column per host count and rate, each figure
# twice) and writes it with every run's log and result to OUT_DIR. Needs root and a build; the
# peers' environment comes from bench/hf_peer/setup_venv.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
source scripts/env.sh
export OMP_NUM_THREADS=1
bin=${MPIBERT_BIN_DIR:-$root/build/bin}
out=${1:-$root/results/ddp_peers/$(date +%F)}
rates=${RATES:-unlimited 1gbit 100mbit} host_counts=${HOSTS:-2 3} rounds=${ROUNDS:-2} steps=${STEPS:-12}
model_config=$(realpath "${MODEL_CONFIG:-configs/small-bert.json}") batch=${BATCH:-8}
variants=${VARIANTS:-mpibert-ddp-sparse mpibert-ddp-dense mpibert-zero1 mpibert-zero2 mpibert-fsdp torch-ddp torch-fsdp2}
[ "$(id -u)" -eq 0 ] || { echo "ddp_peers.sh: the test hosts need root" >&2; exit 1; }
python=$(bash bench/hf_peer/setup_venv.sh)
python=$root/$python
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/mpibert-peers.XXXXXX")
trap 'bash tests/cluster/hosts.sh down "$work/hosts" > /dev/null 2>&1 || true; rm -rf "$work"' EXIT
bash tests/cluster/hosts.sh up "$work/hosts" 3
# shellcheck disable=SC1091
source "$work/hosts/hosts.env"
vocab=$root/data_prep/data/bert-base-uncased/vocab.txt
"$bin/mpibert-prep" split data_prep/data/squad/dev-v1.1.json.gz --articles 0:10 --out "$work/train.json" > /dev/null
"$bin/mpibert-prep" --input "$work/train.json" --vocab "$vocab" --out "$work/shards" --split train --log-level warn

# Global samples/s over steps 3..STEPS of a run: mpibert's from its per-step end times
# (metrics.jsonl's "seconds"), the peer's from its own timer.
samples_per_second() {  # VARIANT RUN_DIR HOSTS
  case $1 in
    torch-*) "$python" -c "import json; print(f\"{json.load(open('$2/result.json'))['samples_per_second']:.3g}\")" ;;
    *) "$python" - "$2/metrics.jsonl" "$3" "$steps" "$batch" <<'EOF'
import json, sys
seconds = {}
for line in open(sys.argv[1]):
    record = json.loads(line)
    if "loss" in record and "seconds" in record:
        seconds[record["step"]] = record["seconds"]
hosts, steps, batch = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
print(f"{(steps - 2) * batch * hosts / (seconds[steps] - seconds[2]):.3g}")
EOF
    ;;
  esac
}

run() {  # VARIANT HOSTS RUN_DIR
  local variant=$1 n=$2 dir=$3 command
  mkdir -p "$dir"
  case $variant in
    torch-*)
      command="env GLOO_SOCKET_IFNAME=eth0 $python $root/bench/ddp_peer/ddp_peer.py --strategy ${variant#torch-}"
      command+=" --config $model_config --master h1 --batch-size $batch --steps $steps --out $dir/result.json" ;;
    mpibert-*)
      local strategy=${variant#mpibert-} extra=""
      case $strategy in
        ddp-sparse) strategy=ddp ;;
        ddp-dense) strategy=ddp extra="--embedding-exchange dense" ;;
        fsdp-kept) strategy=fsdp extra="--keep-gathered-for-backward" ;;
      esac
      command="$bin/mpibert train --model-config $model_config --vocab $vocab --train-shards $work/shards"
      command+=" --output-dir $dir/run --strategy $strategy $extra --batch-size $batch --padding full --threads 1 --seed 7"
      command+=" --max-steps $steps --logging-steps 1 --report-to none --save-strategy no" ;;
  esac
  bash tests/cluster/hosts.sh mpirun "$work/hosts" "$n" "$command" > "$dir/log" 2>&1 || { tail -20 "$dir/log" >&2; return 1; }
  if [[ $variant == torch-* ]]; then samples_per_second "$variant" "$dir" "$n"; return; fi
  samples_per_second "$variant" "$dir/run" "$n"
  # Of mpibert's run, its record: not the trained weights, vocabulary and predictions.
  find "$dir/run" -mindepth 1 -maxdepth 1 ! -name results.json ! -name metrics.jsonl -exec rm -rf {} +
}

declare -A figures
for rate in $rates; do
  if [ "$rate" = unlimited ]; then bash tests/cluster/hosts.sh unshape "$work/hosts"; else bash tests/cluster/hosts.sh shape "$work/hosts" "$rate" 0; fi
  for n in $host_counts; do
    for round in $(seq 1 "$rounds"); do
      ordered=$variants
      [ $((round % 2)) = 1 ] || ordered=$(echo "$variants" | tr ' ' '\n' | tac | tr '\n' ' ')
      for variant in $ordered; do
        figure=$(run "$variant" "$n" "$out/$rate-${n}h-$variant-$round") || figure="failed"
        figures[$variant/$n/$rate]+="${figures[$variant/$n/$rate]:+, }$figure"
        echo "$rate, $n hosts, round $round: $variant $figure samples/s" >&2
      done
    done
  done
done

{
  echo "Global samples/s over steps 3-$steps, $(basename "$(dirname "$model_config")")/$(basename "$model_config"), batch $batch per rank at 384 tokens, 1 rank and 1 thread per test host"
  echo "($(date +%F), commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src include bench 2>/dev/null || echo " + uncommitted changes"), $(lscpu | sed -n 's/^Model name: *//p'))."
  echo
  header="| variant |" rule="|---|"
  for n in $host_counts; do for rate in $rates; do header+=" $n hosts, $rate |"; rule+="--:|"; done; done
  echo "$header"
  echo "$rule"
  for variant in $variants; do
    row="| $variant |"
    for n in $host_counts; do for rate in $rates; do row+=" ${figures[$variant/$n/$rate]} |"; done; done
    echo "$row"
  done
} | tee "$out/table.md"
