#!/usr/bin/env bash
# Fuzzes the readers of outside input (tests/fuzz) under AddressSanitizer + UndefinedBehaviorSanitizer.
#   scripts/fuzz.sh HARNESS|all SECONDS
#   scripts/fuzz.sh --build-only HARNESS|all      (scripts/test.sh builds them while the suites run)
# Builds build-asan/ when needed (scripts/build.sh --asan), then for each harness: replays
# tests/fuzz/corpus/HARNESS (the seeds and the input of every finding fixed), with the
# dictionary of its format (tests/fuzz/dict/), and fuzzes for SECONDS,
# keeping new inputs in build-asan/fuzz-corpus/HARNESS (not committed; later runs start from it).
# Harnesses run side by side, one per core (each is one process, one thread).
# A crash, leak, timeout or sanitizer report stops that harness, leaves its input in
# build-asan/fuzz-findings/ and makes the script exit 1 after the others ran. Prints one line per
# harness: executions, seconds, coverage (edges), features, corpus size, result.
set -euo pipefail
cd "$(dirname "$0")/.."
usage() { echo "usage: scripts/fuzz.sh HARNESS|all SECONDS, or scripts/fuzz.sh --build-only HARNESS|all" >&2; exit 2; }
build_only=0
if [ "${1:-}" = --build-only ]; then build_only=1; shift; [ $# -eq 1 ] || usage; else [ $# -eq 2 ] || usage; fi
all=(fuzz_squad fuzz_squad_jsonl fuzz_question_lines fuzz_squad_parquet fuzz_vocab fuzz_tokenizer fuzz_tokenizer_json fuzz_model_config
     fuzz_train_config fuzz_safetensors fuzz_manifest fuzz_shard fuzz_checkpoint fuzz_score)
if [ "$1" = all ]; then harnesses=("${all[@]}"); else harnesses=("$1"); fi
bash scripts/build.sh --asan "${harnesses[@]}" > /dev/null
[ $build_only = 0 ] || exit 0
seconds=$2
# The harnesses share the sanitizer settings of the suites (tests/sanitizers/).
source scripts/sanitizer_env.sh
mkdir -p build-asan/fuzz-findings build-asan/fuzz-logs
printf '%-18s %10s %8s %8s %8s %7s  %s\n' harness executions seconds edges features corpus result
# One harness: its findings and log under build-asan/, its line of the table in fuzz-logs/NAME.row.
fuzz_one() {
  local name=$1 seeds=tests/fuzz/corpus/$1 work=build-asan/fuzz-corpus/$1 log=build-asan/fuzz-logs/$1.log
  mkdir -p "$work"
  local args=(-max_total_time="$seconds" -timeout=20 -rss_limit_mb=4096 -print_final_stats=1
              -artifact_prefix="build-asan/fuzz-findings/$name-")
  case $name in
    fuzz_safetensors) args+=(-dict=tests/fuzz/dict/safetensors.dict) ;;
    fuzz_train_config) args+=(-dict=tests/fuzz/dict/toml.dict) ;;
    fuzz_squad|fuzz_squad_jsonl|fuzz_question_lines|fuzz_model_config|fuzz_manifest|fuzz_checkpoint|fuzz_score|fuzz_tokenizer_json) args+=(-dict=tests/fuzz/dict/json.dict) ;;
  esac
  local result=ok
  "build-asan/fuzz/$name" "${args[@]}" "$work" "$seeds" > "$log" 2>&1 || result="FINDING (see $log)"
  local executions elapsed last edges features corpus
  executions=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  elapsed=$(sed -n 's/.*Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$log" | tail -1)
  last=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
  edges=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<< "$last")
  features=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<< "$last")
  corpus=$(find "$work" -type f | wc -l)
  printf '%-18s %10s %8s %8s %8s %7s  %s\n' "$name" "${executions:--}" "${elapsed:-$seconds}" "${edges:--}" \
    "${features:--}" "$corpus" "$result" > "build-asan/fuzz-logs/$name.row"
}
# One harness per core; a harness whose row does not end in "ok" (or that wrote none) fails the run.
slots=$(nproc)
for name in "${harnesses[@]}"; do
  while [ "$(jobs -pr | wc -l)" -ge "$slots" ]; do wait -n || true; done
  rm -f "build-asan/fuzz-logs/$name.row"
  fuzz_one "$name" &
done
wait
failed=0
for name in "${harnesses[@]}"; do
  row=build-asan/fuzz-logs/$name.row
  if [ -f "$row" ]; then cat "$row"; else echo "$name: no result (build-asan/fuzz-logs/$name.log)"; failed=1; fi
  [ -f "$row" ] && [[ "$(cat "$row")" == *"  ok" ]] || failed=1
done
exit $failed
