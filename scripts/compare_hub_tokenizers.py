#!/usr/bin/env python3
"""Reads model directories as transformers reads them and as mpibert does, and compares the ids,
tokens and offsets of the same texts: what AutoTokenizer.from_pretrained(DIR) gives against
`mpibert tokenize --tokenizer DIR`, or that both refuse the directory. Files stored compressed
(NAME.xz, as ../shared/data/real-hub keeps its large ones) are read decompressed, from a copy.

    .venv/bin/python scripts/compare_hub_tokenizers.py [--mpibert build/bin/mpibert] DIR [DIR ...]

Prints a Markdown table, one row per directory; exits 1 if any directory differs.
"""
import argparse
import gzip
import json
import lzma
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
SQUAD = os.path.join(ROOT, "data_prep", "data", "squad", "dev-v1.1.json.gz")
EDGE_CASES = os.path.join(ROOT, "tests", "fixtures", "tokenizers", "edge-cases.txt")


def texts():
    data = json.load(gzip.open(SQUAD, "rt", encoding="utf-8"))["data"]
    paragraphs = [p for article in data[:4] for p in article["paragraphs"]]
    lines = [p["context"] for p in paragraphs[:60]] + [qa["question"] for p in paragraphs[:60] for qa in p["qas"]][:200]
    with open(EDGE_CASES, encoding="utf-8") as f:
        lines += [json.loads(line) for line in f if line.strip()]
    return [line for line in lines if "\n" not in line]


def readable_copy(directory, tmp):
    copy = os.path.join(tmp, os.path.basename(os.path.normpath(directory)))
    os.makedirs(copy)
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        if not os.path.isfile(path) or name.endswith(".md"):
            continue
        if name.endswith(".xz"):
            with lzma.open(path) as f, open(os.path.join(copy, name[:-3]), "wb") as out:
                shutil.copyfileobj(f, out)
        else:
            shutil.copy(path, os.path.join(copy, name))
    return copy


def hf_encodings(directory, lines):
    import transformers

    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    except Exception as e:
        return None, (str(e).strip().splitlines() or [type(e).__name__])[0]
    out = []
    for text in lines:
        e = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        out.append((e["input_ids"], tokenizer.convert_ids_to_tokens(e["input_ids"]), [list(o) for o in e["offset_mapping"]]))
    return out, type(tokenizer).__name__


def mpibert_encodings(mpibert, directory, lines):
    run = subprocess.run([mpibert, "tokenize", "--tokenizer", directory], input="\n".join(lines) + "\n", text=True,
                         capture_output=True)
    if run.returncode != 0 and not run.stdout:
        return None, (run.stderr.strip().splitlines() or ["exit %d" % run.returncode])[-1]
    records = [json.loads(line) for line in run.stdout.splitlines()]
    return [(r["ids"], r["tokens"], r["offsets"]) for r in records], ""


def compare(mpibert, directory, lines):
    with tempfile.TemporaryDirectory() as tmp:
        copy = readable_copy(directory, tmp)
        hf, hf_note = hf_encodings(copy, lines)
        ours, our_note = mpibert_encodings(mpibert, copy, lines)
    name = os.path.basename(os.path.normpath(directory))
    if hf is None and ours is None:
        return name, True, "both refuse it (transformers: %s; mpibert: %s)" % (hf_note[:100], our_note[:100])
    if hf is None or ours is None:
        return name, False, "transformers: %s; mpibert: %s" % (hf_note[:100] if hf is None else "reads it",
                                                                our_note[:100] if ours is None else "reads it")
    differ = [i for i in range(len(lines)) if i >= len(ours) or hf[i] != ours[i]]
    if not differ:
        return name, True, "%d of %d texts the same (%s)" % (len(lines), len(lines), hf_note)
    i = differ[0]
    return name, False, "%d of %d texts differ; first %r: HF %s, mpibert %s" % (
        len(differ), len(lines), lines[i][:40], hf[i][1][:8], ours[i][1][:8] if i < len(ours) else "none")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mpibert", default=os.path.join(ROOT, "build", "bin", "mpibert"))
    parser.add_argument("directories", nargs="+")
    args = parser.parse_args()
    lines = texts()
    rows = [compare(args.mpibert, d, lines) for d in args.directories]
    print("| directory | same | what |\n| --- | --- | --- |")
    for name, same, what in rows:
        print("| %s | %s | %s |" % (name, "yes" if same else "**no**", what.replace("|", "\\|")))
    return 0 if all(same for _, same, _ in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
