#!/usr/bin/env bash
# A disk that fills while a checkpoint is saved: training on 2 ranks into a 40 MiB tmpfs, where the
# first checkpoint (about 25 MB) fits and the second does not. The job must end promptly on both
# ranks with a message naming the file and "No space left on device", remove the half-written
# staging directory, and leave the first checkpoint intact: it matches its checksums and a run
# elsewhere resumes from it to the end. Needs root (mount): skipped (77) without it. Registered in
# ctest as chaos.full_disk.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bin=${MPIBERT_BIN_DIR:-$root/build/bin}
fail() { echo "FAIL: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || { echo "SKIP: mounting a small tmpfs needs root"; exit 77; }
work=$(mktemp -d "${TMPDIR:-/tmp}/mpibert-full-disk.XXXXXX")
trap 'umount "$work/disk" 2>/dev/null || true; rm -rf "$work"' EXIT
vocab=$root/data_prep/data/bert-base-uncased/vocab.txt

"$bin/mpibert-prep" split "$root/data_prep/data/squad/dev-v1.1.json.gz" --articles 0:1 --out "$work/train.json"
"$bin/mpibert-prep" --input "$work/train.json" --vocab "$vocab" --out "$work/train" --split train --log-level warn
mkdir "$work/disk"
mount -t tmpfs -o size=40m tmpfs "$work/disk"
train=("${MPIEXEC:-mpirun}" -n 2 --oversubscribe --bind-to none "$bin/mpibert" train --train-shards "$work/train"
       --model-config "$root/tests/fixtures/model/config.json" --vocab "$vocab" --max-steps 3 --save-steps 1
       --save-total-limit 0 --batch-size 4 --threads 1 --logging-steps 1 --collective-timeout 120)

start=$(date +%s)
if "${train[@]}" --output-dir "$work/disk/run" > "$work/log" 2>&1; then fail "training on a full disk succeeded"; fi
took=$(( $(date +%s) - start ))
[ "$took" -lt 60 ] || fail "the job took ${took} s to end (a rank waited in a collective?)"
grep -q "No space left on device" "$work/log" || fail "no 'No space left on device' in the output: $(tail -20 "$work/log")"
grep -q "$work/disk/run/.checkpoint-2.tmp/" "$work/log" || fail "the message does not name the file: $(grep -i 'space' "$work/log")"
[ -d "$work/disk/run/checkpoint-1" ] || fail "the first checkpoint is gone: $(ls -A "$work/disk/run")"
[ -z "$(find "$work/disk/run" -maxdepth 1 -name '.checkpoint-*')" ] || fail "a staging directory was left: $(ls -A "$work/disk/run")"
[ ! -d "$work/disk/run/checkpoint-2" ] || fail "a checkpoint-2 exists although it could not be written"

# The first checkpoint: every file as its checksums say, and a run resumes from it elsewhere.
python3 - "$work/disk/run/checkpoint-1" <<'PY' || fail "checkpoint-1 does not match its checksums"
import json, sys, zlib
folder = sys.argv[1]
for name, expected in json.load(open(folder + "/checksums.json"))["files"].items():
    data = open(f"{folder}/{name}", "rb").read()
    assert len(data) == expected["bytes"] and "%08x" % zlib.crc32(data) == expected["crc32"], name
PY
mkdir "$work/elsewhere"
cp -r "$work/disk/run/checkpoint-1" "$work/elsewhere/"
"${train[@]}" --output-dir "$work/elsewhere" --resume auto > "$work/resume.log" 2>&1 || fail "resume: $(tail -20 "$work/resume.log")"
grep -q "resumed from $work/elsewhere/checkpoint-1 at step 1" "$work/resume.log" || fail "did not resume from checkpoint-1"
echo "full disk: job ended in ${took} s with: $(grep -m1 'No space left on device' "$work/log" | sed 's/.*\] //')"
