#!/usr/bin/env bash
# scripts/convert_pytorch_bin.py on checkpoints made here as older HF versions saved them: the
# fixture's QA model (written by HF) saved with torch.save under old LayerNorm names (gamma, beta)
# and with the MLM decoder tied to the word embeddings, in torch's zip format, its legacy format,
# and as two shards with an index. Each converted model.safetensors must hold the fixture's tensors
# byte for byte, and `mpibert predict` must give the same answer from it as from the fixture.
# Then the refusals: no checkpoint, a corrupt one, an existing model.safetensors. ctest
# model.convert_pytorch_bin. Environment (optional): MPIBERT_PYTHON (.venv's python, with torch),
# MPIBERT_BIN_DIR (build/bin), MPIBERT_FIXTURES (tests/fixtures), KEEP_TMP=1.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
py=${MPIBERT_PYTHON:-$root/.venv/bin/python3}
bin=${MPIBERT_BIN_DIR:-$root/build/bin}
fixture=${MPIBERT_FIXTURES:-$root/tests/fixtures}/model
vocab=$root/data_prep/data/bert-base-uncased/vocab.txt
convert=("$py" "$root/scripts/convert_pytorch_bin.py")
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test_convert.XXXXXX")
if [ "${KEEP_TMP:-0}" = 1 ]; then echo "keeping $tmp"; else trap 'rm -rf "$tmp"' EXIT; fi
fail() { echo "FAIL: $*"; exit 1; }

echo "== checkpoints as older HF versions saved them"
"$py" - "$fixture/model.safetensors" "$tmp" <<'EOF'
import json, os, struct, sys
import torch

source, out = sys.argv[1:]
raw = open(source, "rb").read()
(length,) = struct.unpack("<Q", raw[:8])
header = json.loads(raw[8:8 + length])
dtypes = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "I64": torch.int64}
state = {}
for name, entry in header.items():
    if name != "__metadata__":
        begin, end = entry["data_offsets"]
        data = bytearray(raw[8 + length + begin:8 + length + end])
        state[name.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta")] = \
            torch.frombuffer(data, dtype=dtypes[entry["dtype"]]).reshape(entry["shape"])
state["cls.predictions.decoder.weight"] = state["bert.embeddings.word_embeddings.weight"]  # tied: one tensor
for kind in ("zip", "legacy", "sharded"):
    os.makedirs(os.path.join(out, kind))
torch.save(state, os.path.join(out, "zip/pytorch_model.bin"))
torch.save(state, os.path.join(out, "legacy/pytorch_model.bin"), _use_new_zipfile_serialization=False)
names = sorted(state)
shards = {"pytorch_model-00001-of-00002.bin": names[:len(names) // 2],
          "pytorch_model-00002-of-00002.bin": names[len(names) // 2:]}
for shard, keys in shards.items():
    torch.save({k: state[k] for k in keys}, os.path.join(out, "sharded", shard))
with open(os.path.join(out, "sharded/pytorch_model.bin.index.json"), "w") as f:
    json.dump({"metadata": {}, "weight_map": {k: s for s, keys in shards.items() for k in keys}}, f)
EOF
mkdir -p "$tmp/reference"
cp "$fixture/model.safetensors" "$fixture/config.json" "$tmp/reference/"
for dir in reference zip legacy sharded; do
  cp "$fixture/config.json" "$tmp/$dir/"
  cp "$vocab" "$tmp/$dir/vocab.txt"
done

echo "== mpibert refuses pytorch_model.bin and names the conversion"
set +e
refusal=$("$bin/mpibert" predict --model "$tmp/zip" --context "x" --question "y" 2>&1)
set -e
grep -qF "scripts/convert_pytorch_bin.py $tmp/zip" <<<"$refusal" || fail "mpibert's refusal does not name the script: $refusal"

question=(--context "The Denver Broncos defeated the Carolina Panthers to win Super Bowl 50." --question "Who lost Super Bowl 50?")
reference=$("$bin/mpibert" predict --model "$tmp/reference" "${question[@]}" 2>/dev/null)
for dir in zip legacy sharded; do
  echo "== convert $dir"
  "${convert[@]}" "$tmp/$dir"
  [ -z "$(find "$tmp/$dir" -name '*.tmp-*')" ] || fail "$dir: a temporary file was left"
  "$py" - "$fixture/model.safetensors" "$tmp/$dir/model.safetensors" "$dir" <<'EOF' || exit 1
import json, struct, sys

def tensors(path):
    raw = open(path, "rb").read()
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + length])
    meta = header.pop("__metadata__", {})
    return meta, {name: (e["dtype"], e["shape"], raw[8 + length + e["data_offsets"][0]:8 + length + e["data_offsets"][1]])
                  for name, e in header.items()}

_, want = tensors(sys.argv[1])
meta, got = tensors(sys.argv[2])
kind = sys.argv[3]
extra = set(got) - set(want)
allowed = {"cls.predictions.decoder.weight"} if kind == "sharded" else set()  # shards keep no tie
problems = ["missing %s" % n for n in sorted(set(want) - set(got))]
problems += ["unexpected %s" % n for n in sorted(extra - allowed)]
problems += ["%s differs" % n for n in sorted(set(want) & set(got)) if got[n] != want[n]]
if meta.get("format") != "pt":
    problems.append("metadata %r lacks format pt" % meta)
if problems:
    print("FAIL: %s: %s" % (kind, "; ".join(problems)))
    sys.exit(1)
print("%s: %d tensors equal to the fixture's byte for byte, names as HF loads them" % (kind, len(want)))
EOF
  answer=$("$bin/mpibert" predict --model "$tmp/$dir" "${question[@]}" 2>/dev/null)
  [ "$answer" = "$reference" ] || fail "$dir: predict gives $answer, the fixture model gives $reference"
done
echo "predict, converted and fixture: $reference"

echo "== --out writes beside a copy of the config and vocab"
"${convert[@]}" "$tmp/zip" --out "$tmp/copied"
for f in model.safetensors config.json vocab.txt; do [ -f "$tmp/copied/$f" ] || fail "--out: $f missing"; done
cmp "$tmp/copied/model.safetensors" "$tmp/zip/model.safetensors" || fail "--out wrote another file"

echo "== refusals"
expect_refusal() {  # WHAT NEEDLE COMMAND...: exit status 1 and NEEDLE in the message
  local what=$1 needle=$2; shift 2
  set +e
  out=$("$@" 2>&1); rc=$?
  set -e
  [ $rc -eq 1 ] || fail "$what: exit status $rc, expected 1: $out"
  grep -qF -- "$needle" <<<"$out" || fail "$what: the message does not name $needle: $out"
  echo "$what: $out"
}
mkdir -p "$tmp/empty" "$tmp/corrupt"
expect_refusal "no checkpoint" "$tmp/empty" "${convert[@]}" "$tmp/empty"
head -c 4000 "$tmp/zip/pytorch_model.bin" > "$tmp/corrupt/pytorch_model.bin"
expect_refusal "a truncated checkpoint" "$tmp/corrupt/pytorch_model.bin" "${convert[@]}" "$tmp/corrupt"
[ -z "$(ls "$tmp/corrupt" | grep -v '^pytorch_model.bin$')" ] || fail "a truncated checkpoint left files: $(ls "$tmp/corrupt")"
expect_refusal "an existing model.safetensors" "--force" "${convert[@]}" "$tmp/zip"
"${convert[@]}" "$tmp/zip" --force >/dev/null
echo "PASS"
