#!/usr/bin/env bash
# The docs' commands that run in seconds, run as written (ctest docs.commands):
#   1. README.md's "A multi-rank run on a workstation" block in a fresh clone of this checkout
#      (its .venv and build/ linked in for install-deps.sh and build.sh, which the other tests
#      cover), the mpirun line bounded by --max-steps 5;
#   2. every `jobs/local.sh ...` line of README.md's and jobs/README.md's bash blocks, from a
#      fresh clone too (RESULTS_DIR unset: the clone's results/), with --max-steps 3;
#   3. jobs/README.md's dry-run example: each `$ jobs/submit.sh ... --dry-run` line of its text
#      block run, its output equal to the lines shown (the clone's path written /path).
# Environment: MPIBERT_BIN_DIR (the build's bin/, linked into the clone).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${MPIBERT_BIN_DIR:-$root/build/bin}
fail() { echo "FAIL: $*" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The checkout as committed plus what is changed but not committed (a test of the working tree).
git clone -q "$root" "$work/clone"
(cd "$root" && git diff HEAD --binary) | (cd "$work/clone" && git apply --allow-empty 2> /dev/null || git apply)
(cd "$root" && git ls-files --others --exclude-standard -z) | (cd "$root" && xargs -0 -r cp --parents -t "$work/clone")
clone=$work/clone
ln -s "$(cd "$root/.venv" && pwd)" "$clone/.venv"
mkdir -p "$clone/build" && ln -s "$(cd "$bin" && pwd)" "$clone/build/bin"
cd "$clone"
source scripts/env.sh

# A fenced block's lines: the first ```LANG block after the line matching PATTERN in FILE,
# continuation lines joined.
block_after() {  # FILE PATTERN LANG
  awk -v pattern="$2" -v lang="$3" '
    found == 0 && $0 ~ pattern { found = 1; next }
    found == 1 && $0 == "```" lang { found = 2; next }
    found == 2 && $0 == "```" { exit }
    found == 2 { print }' "$1" | sed -e ':a' -e '/\\$/N; s/\\\n//; ta'
}

# 1. README's workstation run.
commands=$(block_after README.md '^## A multi-rank run on a workstation' bash)
[ -n "$commands" ] || fail "README.md: no bash block under 'A multi-rank run on a workstation'"
n=0
while IFS= read -r line; do
  line=${line%%#*}
  [[ $line =~ [^[:space:]] ]] || continue
  case $line in
    "bash scripts/install-deps.sh"*|"bash scripts/build.sh"*) echo "-- (linked in) $line"; continue ;;
    mpirun*) line="$line --max-steps 5" ;;
  esac
  echo "-- $line"
  bash -c "$line" < /dev/null > "$work/readme-$n.log" 2>&1 || { tail -20 "$work/readme-$n.log"; fail "README.md: $line"; }
  n=$((n + 1))
done <<< "$commands"
grep -q "^eval_f1 = " "$work/readme-$((n - 1)).log" || fail "README.md's run printed no eval_f1"
[ -f results/sample/ddp/results.json ] || fail "README.md's run left no results/sample/ddp/results.json"

# 2. jobs/local.sh as the READMEs write it.
found=0
for doc in README.md jobs/README.md; do
  while IFS= read -r line; do
    short=$(sed 's/--max-steps [0-9]*/--max-steps 3/' <<< "$line")
    [[ $short == *--max-steps* ]] || short="$short --max-steps 3"
    echo "-- ($doc) $short"
    rm -rf results/shards
    bash -c "$short" < /dev/null > "$work/local.log" 2>&1 || { tail -20 "$work/local.log"; fail "$doc: $line"; }
    grep -q "==== finished: exit status 0" "$work/local.log" || { tail -20 "$work/local.log"; fail "$doc: $line did not finish"; }
    found=$((found + 1))
  done < <(awk '/^```bash$/ { on = 1; next } /^```$/ { on = 0 } on && /^jobs\/local\.sh / { print }' "$doc")
done
[ "$found" -ge 2 ] || fail "fewer than 2 jobs/local.sh lines in README.md and jobs/README.md ($found)"

# 3. jobs/README's dry-run example, output for output.
example=$(block_after jobs/README.md '^generates for the default site' text)
[ -n "$example" ] || fail "jobs/README.md: no text block of the dry-run example"
expected="" command=""
check_dry_run() {
  [ -n "$command" ] || return 0
  local got
  got=$(env -u DEVICE -u MPIBERT_SITE -u RESULTS_DIR bash -c "$command" < /dev/null 2>&1 | sed "s|$clone|/path|g") ||
    fail "jobs/README.md: $command failed: $got"
  [ "$got" = "${expected%$'\n'}" ] || fail "jobs/README.md: $command printed
$got
where the README shows
${expected%$'\n'}"
  echo "-- $command: as shown"
}
while IFS= read -r line; do
  if [[ $line == '$ '* ]]; then
    check_dry_run
    command=${line#\$ } expected=""
  else
    expected+="$line"$'\n'
  fi
done <<< "$example"
check_dry_run
echo "ok: the docs' commands ran as written"
