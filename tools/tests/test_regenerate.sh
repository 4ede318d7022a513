#!/usr/bin/env bash
# The committed reports regenerate byte for byte from the committed data with the code in tools/:
# results/reference's table, comparison.md and plots (tools/reference.sh --render-only, on a copy of
# the runs) and the scaling model's check and projection (tools/scaling-model all --out elsewhere).
# A difference means the code changed what it writes: re-render and commit the files with it.
# Runs under the tools' Python (tools/launch.sh: MPIBERT_TOOLS_PYTHON, else the checkout's .venv),
# which must have the plotting libraries of tools/constraints.txt at their versions: the PNG bytes
# depend on them (scripts/install-deps.sh installs them). About 15 s.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
python=${MPIBERT_TOOLS_PYTHON:-$root/.venv/bin/python3}
"$python" - "$root/tools/constraints.txt" <<'PY' || exit 1
import importlib.metadata as m, sys
wrong = []
for line in open(sys.argv[1]):
    line = line.split("#")[0].strip()
    if line:
        name, version = line.split("==")
        try:
            have = m.version(name)
        except m.PackageNotFoundError:
            have = "none"
        if have != version:
            wrong.append("%s %s (the reports were rendered with %s)" % (name, have, version))
if wrong:
    sys.exit("FAIL: %s has %s: bash scripts/install-deps.sh, or pip install -c tools/constraints.txt ./tools"
             % (sys.executable, ", ".join(wrong)))
PY
export MPIBERT_TOOLS_PYTHON=$python
tmp=$(mktemp -d "${TMPDIR:-/tmp}/mpibert-regenerate.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
failed=0

same() {  # COMMITTED REGENERATED
  if cmp -s "$1" "$2"; then
    echo "same: ${1#"$root"/}"
  else
    echo "FAIL: ${1#"$root"/} differs from what the code writes now ($2)"
    failed=1
  fi
}

cp -r "$root/results/reference" "$tmp/reference"
bash "$root/tools/reference.sh" --render-only "$tmp/reference" > /dev/null
for file in table.md comparison.md loss.png scaling.png phases.png memory.png; do
  same "$root/results/reference/$file" "$tmp/reference/$file"
done

"$root/tools/scaling-model" all --out "$tmp/scaling_model" > /dev/null
for file in check.md check.png projection.md projection-hsdp.md projection.png projection-memory.png; do
  same "$root/results/scaling_model/$file" "$tmp/scaling_model/$file"
done
exit $failed
