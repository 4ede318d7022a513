#!/usr/bin/env bash
# Fuzzes the readers of outside input (tests/fuzz) under AddressSanitizer + UndefinedBehaviorSanitizer.
#   scripts/fuzz.sh HARNESS|all SECONDS
# Builds build-asan/ when needed (scripts/build.sh --asan), then for each harness: replays
# tests/fuzz/corpus/HARNESS (the seeds and the input of every finding fixed), with the
# dictionary of its format (tests/fuzz/dict/), and fuzzes for SECONDS,
# keeping new inputs in build-asan/fuzz-corpus/HARNESS (not committed; later runs start from it).
# A crash, leak, timeout or sanitizer report stops that harness, leaves its input in
# build-asan/fuzz-findings/ and makes the script exit 1 after the others ran. Prints one line per
# harness: executions, seconds, coverage (edges), features, corpus size, result.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 2 ] || { echo "usage: scripts/fuzz.sh HARNESS|all SECONDS" >&2; exit 2; }
all=(fuzz_squad fuzz_vocab fuzz_tokenizer fuzz_model_config fuzz_train_config fuzz_safetensors fuzz_manifest fuzz_shard
     fuzz_checkpoint fuzz_score)
if [ "$1" = all ]; then harnesses=("${all[@]}"); else harnesses=("$1"); fi
seconds=$2
bash scripts/build.sh --asan "${harnesses[@]}" > /dev/null
# The harnesses share the sanitizer settings of the suites (tests/sanitizers/).
source scripts/sanitizer_env.sh
mkdir -p build-asan/fuzz-findings build-asan/fuzz-logs
printf '%-18s %10s %8s %8s %8s %7s  %s\n' harness executions seconds edges features corpus result
failed=0
for name in "${harnesses[@]}"; do
  seeds=tests/fuzz/corpus/$name work=build-asan/fuzz-corpus/$name log=build-asan/fuzz-logs/$name.log
  mkdir -p "$work"
  args=(-max_total_time="$seconds" -timeout=20 -rss_limit_mb=4096 -print_final_stats=1
        -artifact_prefix="build-asan/fuzz-findings/$name-")
  case $name in
    fuzz_safetensors) args+=(-dict=tests/fuzz/dict/safetensors.dict) ;;
    fuzz_train_config) args+=(-dict=tests/fuzz/dict/toml.dict) ;;
    fuzz_squad|fuzz_model_config|fuzz_manifest|fuzz_checkpoint|fuzz_score) args+=(-dict=tests/fuzz/dict/json.dict) ;;
  esac
  result=ok
  "build-asan/fuzz/$name" "${args[@]}" "$work" "$seeds" > "$log" 2>&1 || result="FINDING (see $log)"
  [ "$result" = ok ] || failed=1
  executions=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  elapsed=$(sed -n 's/.*Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$log" | tail -1)
  last=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
  edges=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<< "$last")
  features=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<< "$last")
  corpus=$(find "$work" -type f | wc -l)
  printf '%-18s %10s %8s %8s %8s %7s  %s\n' "$name" "${executions:--}" "${elapsed:-$seconds}" "${edges:--}" \
    "${features:--}" "$corpus" "$result"
done
exit $failed
