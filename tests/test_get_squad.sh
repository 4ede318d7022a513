#!/usr/bin/env bash
# scripts/get_squad.sh without the network: the bundled dev sets (.json.gz) taken with --from are
# written and pass their published SHA-256; a second call finds them present; a corrupted copy is
# refused, naming the file and both sums, and leaves nothing behind; a file that is nowhere, with
# --offline, is an error. Registered in ctest as data.get_squad.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
fail() { echo "FAIL: $*" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/mpibert-get-squad.XXXXXX")
trap 'rm -rf "$work"' EXIT
get=$root/scripts/get_squad.sh bundled=$root/data_prep/data/squad

bash "$get" --version all --split dev --from "$bundled" --offline --out "$work/out" > "$work/log" || fail "$(cat "$work/log")"
for name in dev-v1.1.json dev-v2.0.json; do
  cmp -s "$work/out/$name" <(gzip -dc "$bundled/$name.gz") || fail "$name differs from the bundled one"
done
grep -q "dev-v1.1.json from $bundled/dev-v1.1.json.gz, SHA-256 checked" "$work/log" || fail "no origin line: $(cat "$work/log")"
bash "$get" --version all --split dev --offline --out "$work/out" > "$work/log2"
[ "$(grep -c "present, SHA-256 checked" "$work/log2")" = 2 ] || fail "a second call did not find both present: $(cat "$work/log2")"

# A corrupted copy: refused, named, nothing written.
mkdir "$work/bad"
gzip -dc "$bundled/dev-v1.1.json.gz" | sed 's/"version": "1.1"/"version": "1.2"/' > "$work/bad/dev-v1.1.json"
if bash "$get" --split dev --from "$work/bad" --offline --out "$work/out2" 2> "$work/err"; then fail "a corrupted file was accepted"; fi
grep -q "$work/bad/dev-v1.1.json: SHA-256 .*, but the published dev-v1.1.json has 95aa6a52" "$work/err" || fail "message: $(cat "$work/err")"
[ -z "$(ls -A "$work/out2")" ] || fail "something was left in --out: $(ls -A "$work/out2")"

# Nowhere to be found, offline.
if bash "$get" --split train --offline --out "$work/out3" 2> "$work/err"; then fail "--offline without the file succeeded"; fi
grep -q "train-v1.1.json is neither in" "$work/err" || fail "message: $(cat "$work/err")"
echo "data.get_squad: passed"
