#!/usr/bin/env bash
# Fetches the SQuAD train and dev sets from their official location and checks each file's
# published SHA-256 (the sums TensorFlow Datasets publishes for these URLs; the bundled dev files
# match them). Files already downloaded are taken from --from DIR (as .json or .json.gz) instead.
# Each file is written under a temporary name and renamed only once its checksum is right.
#
#   scripts/get_squad.sh [--version 1.1|2.0|all] [--split train|dev|all] [--from DIR] [--offline] [--out DIR]
#
# --out defaults to data_prep/downloads/squad (ignored by git). --offline never downloads: a file
# neither in --out nor in --from is an error. Then, for example:
#   build/bin/mpibert-prep --input data_prep/downloads/squad/train-v1.1.json --vocab VOCAB --out SHARDS --split train
set -euo pipefail
cd "$(dirname "$0")/.."
base_url=https://rajpurkar.github.io/SQuAD-explorer/dataset
declare -A sha256=(
  [train-v1.1.json]=3527663986b8295af4f7fcdff1ba1ff3f72d07d61a20f487cb238a6ef92fd955
  [dev-v1.1.json]=95aa6a52d5d6a735563366753ca50492a658031da74f301ac5238b03966972c9
  [train-v2.0.json]=68dcfbb971bd3e96d5b46c7177b16c1a4e7d4bdef19fb204502738552dede002
  [dev-v2.0.json]=80a5225e94905956a6446d296ca1093975c4d3b3260f1d6c8f68bc2ab77182d8
)
usage() { sed -n '2,12s/^# \{0,1\}//p' "$0" >&2; exit 2; }
versions=(1.1) splits=(train dev) from="" offline=0 out=data_prep/downloads/squad
while [ $# -gt 0 ]; do
  case $1 in
    --version) case ${2:-} in 1.1|2.0) versions=("$2");; all) versions=(1.1 2.0);; *) usage;; esac; shift 2;;
    --split) case ${2:-} in train|dev) splits=("$2");; all) splits=(train dev);; *) usage;; esac; shift 2;;
    --from) from=${2:?--from needs a directory}; shift 2;;
    --offline) offline=1; shift;;
    --out) out=${2:?--out needs a directory}; shift 2;;
    *) usage;;
  esac
done
[ -z "$from" ] || [ -d "$from" ] || { echo "get_squad: --from $from is not a directory" >&2; exit 1; }
mkdir -p "$out"

checksum_of() { sha256sum "$1" | cut -d' ' -f1; }

# Copies or downloads NAME into TMP; prints where it came from.
fetch() {
  local name=$1 tmp=$2
  if [ -n "$from" ] && [ -f "$from/$name" ]; then
    cp "$from/$name" "$tmp"; echo "$from/$name"
  elif [ -n "$from" ] && [ -f "$from/$name.gz" ]; then
    gzip -dc "$from/$name.gz" > "$tmp"; echo "$from/$name.gz"
  elif [ "$offline" = 1 ]; then
    echo "get_squad: $name is neither in $out nor in ${from:-(no --from)}, and --offline forbids downloading it" >&2
    return 1
  elif command -v curl >/dev/null; then
    curl -fsSL --retry 3 -o "$tmp" "$base_url/$name" || { echo "get_squad: downloading $base_url/$name failed" >&2; return 1; }
    echo "$base_url/$name"
  else
    wget -q -O "$tmp" "$base_url/$name" || { echo "get_squad: downloading $base_url/$name failed" >&2; return 1; }
    echo "$base_url/$name"
  fi
}

for version in "${versions[@]}"; do
  for split in "${splits[@]}"; do
    name=$split-v$version.json target=$out/$name expected=${sha256[$split-v$version.json]}
    if [ -f "$target" ] && [ "$(checksum_of "$target")" = "$expected" ]; then
      echo "get_squad: $target present, SHA-256 checked"
      continue
    fi
    tmp=$(mktemp "$out/.$name.XXXXXX")
    trap 'rm -f "$tmp"' EXIT
    source=$(fetch "$name" "$tmp") || exit 1
    actual=$(checksum_of "$tmp")
    if [ "$actual" != "$expected" ]; then
      rm -f "$tmp"
      echo "get_squad: $source: SHA-256 $actual, but the published $name has $expected: not written" >&2
      exit 1
    fi
    mv "$tmp" "$target"
    trap - EXIT
    echo "get_squad: $target from $source, SHA-256 checked"
  done
done
