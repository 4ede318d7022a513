#!/usr/bin/env python3
"""Writes the same SQuAD articles in every format mpibert-prep reads, and bad files of each, for
tests/test_prep_formats.cpp (and bench/prep_formats.sh). Needs pyarrow (the .venv's Python).

    write_squad_formats.py SQUAD_JSON_GZ OUT_DIR [--articles N] [--v2 SQUAD_V2_JSON_GZ]
                           [--only-formats]   (bench/prep_formats.sh: the formats alone)

OUT_DIR/good/: the first N articles of SQUAD_JSON_GZ as
  nested.json            SQuAD's own layout (those articles only)
  flat.json              run_qa.py's {"data": [records]} (datasets' to_json(lines=False) of a
                         {"data": ...} field); list.json, a bare array of records
  lines.jsonl, lines.jsonl.gz, lines-named.json   JSON Lines (datasets' to_json default), the last
                         under a .json name as to_json writes it
  squad.parquet          one Parquet file as the Hub stores rajpurkar/squad (answers a struct of
                         list<string> text and list<int32> answer_start)
  hub/plain_text/        the Hub's shards: train-0000{0,1}-of-00002.parquet (the articles split in
                         two) and validation-00000-of-00001.parquet (the first article only)
  cache/                 a fake HF cache with rajpurkar/squad laid out as huggingface_hub lays it
                         out (refs/main, snapshots/COMMIT/plain_text/*.parquet linked to blobs/)
with --v2: v2-nested.json and v2.parquet, the first N articles of SQuAD v2.0 (unanswerable
questions have empty lists). OUT_DIR/bad/: files that mpibert-prep must refuse (see below).
Every record is one question; records of one paragraph are consecutive, as the Hub has them.
"""
import argparse, gzip, hashlib, json, os

import pyarrow as pa
import pyarrow.parquet as pq

SCHEMA = pa.schema([("id", pa.string()), ("title", pa.string()), ("context", pa.string()), ("question", pa.string()),
                    ("answers", pa.struct([("text", pa.list_(pa.string())), ("answer_start", pa.list_(pa.int32()))]))])


def records(squad):
    """run_qa.py's records of a nested SQuAD document, in file order."""
    out = []
    for article in squad["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                out.append({"id": qa["id"], "title": article["title"], "context": paragraph["context"],
                            "question": qa["question"],
                            "answers": {"text": [a["text"] for a in qa["answers"]],
                                        "answer_start": [a["answer_start"] for a in qa["answers"]]}})
    return out


def check_unambiguous(squad):
    """The records' grouping gives back these articles: no two consecutive articles share a title,
    no two consecutive paragraphs a context, no paragraph is without questions."""
    titles = [a["title"] for a in squad["data"]]
    assert all(a != b for a, b in zip(titles, titles[1:])), "consecutive articles with one title"
    for article in squad["data"]:
        contexts = [p["context"] for p in article["paragraphs"]]
        assert all(a != b for a, b in zip(contexts, contexts[1:])), "consecutive paragraphs with one context"
        assert all(p["qas"] for p in article["paragraphs"]), "a paragraph without questions"


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def lines(rows):
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


def parquet(path, rows, schema=SCHEMA, row_group_size=None):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path, row_group_size=row_group_size)


def first_articles(path, count):
    squad = json.load(gzip.open(path))
    squad["data"] = squad["data"][:count]
    check_unambiguous(squad)
    return squad


def fake_cache(cache, files):
    """huggingface_hub's layout: blobs/SHA256 and snapshots/COMMIT/PATH -> ../../blobs/SHA256."""
    repo = os.path.join(cache, "datasets--rajpurkar--squad")
    commit = "7b6d24c440a36b6815f21b70d25016731768db1f"
    write(os.path.join(repo, "refs", "main"), commit)
    for name, source in files.items():
        data = open(source, "rb").read()
        blob = hashlib.sha256(data).hexdigest()
        write(os.path.join(repo, "blobs", blob), data)
        link = os.path.join(repo, "snapshots", commit, name)
        os.makedirs(os.path.dirname(link), exist_ok=True)
        os.symlink(os.path.relpath(os.path.join(repo, "blobs", blob), os.path.dirname(link)), link)
    write(os.path.join(repo, "snapshots", commit, "README.md"), "# squad\n")


def good_files(out, squad, v2, only_formats=False):
    rows = records(squad)
    write(f"{out}/nested.json", json.dumps(squad, ensure_ascii=False))
    write(f"{out}/flat.json", json.dumps({"version": squad.get("version"), "data": rows}, ensure_ascii=False))
    write(f"{out}/list.json", json.dumps(rows, ensure_ascii=False))
    write(f"{out}/lines.jsonl", lines(rows))
    write(f"{out}/lines.jsonl.gz", gzip.compress(lines(rows).encode(), mtime=0))
    write(f"{out}/lines-named.json", lines(rows))
    parquet(f"{out}/squad.parquet", rows, row_group_size=100)  # several row groups
    if only_formats:
        return
    # The Hub's shards: the articles split in two files at an article boundary.
    first = len(records({"data": squad["data"][:len(squad["data"]) // 2]}))
    hub = f"{out}/hub/plain_text"
    parquet(f"{hub}/train-00000-of-00002.parquet", rows[:first])
    parquet(f"{hub}/train-00001-of-00002.parquet", rows[first:])
    validation = records({"data": squad["data"][:1]})
    parquet(f"{hub}/validation-00000-of-00001.parquet", validation)
    write(f"{out}/validation-nested.json", json.dumps({"version": "1.1", "data": squad["data"][:1]}, ensure_ascii=False))
    fake_cache(f"{out}/cache", {f"plain_text/{name}": f"{hub}/{name}" for name in sorted(os.listdir(hub))})
    if v2:
        write(f"{out}/v2-nested.json", json.dumps(v2, ensure_ascii=False))
        parquet(f"{out}/v2.parquet", records(v2))


def bad_files(out):
    """Two articles of one question each; then each file breaks one thing."""
    rows = [{"id": "a1", "title": "A", "context": "Denver Broncos won Super Bowl 50.", "question": "Who won?",
             "answers": {"text": ["Denver Broncos"], "answer_start": [0]}},
            {"id": "b1", "title": "B", "context": "The game was played in Santa Clara.", "question": "Where?",
             "answers": {"text": ["Santa Clara"], "answer_start": [23]}}]
    parquet(f"{out}/ok.parquet", rows)
    data = open(f"{out}/ok.parquet", "rb").read()
    write(f"{out}/truncated.parquet", data[: len(data) // 2])
    corrupt = bytearray(data)
    footer = len(corrupt) - 8 - int.from_bytes(corrupt[-8:-4], "little")  # the Thrift footer's first byte
    for i in range(footer, footer + 24):
        corrupt[i] ^= 0xA5
    write(f"{out}/corrupt.parquet", bytes(corrupt))
    parquet(f"{out}/no-question.parquet", [{k: v for k, v in row.items() if k != "question"} for row in rows],
            schema=pa.schema([field for field in SCHEMA if field.name != "question"]))
    parquet(f"{out}/answers-as-string.parquet", [dict(row, answers=json.dumps(row["answers"])) for row in rows],
            schema=pa.schema([field if field.name != "answers" else pa.field("answers", pa.string()) for field in SCHEMA]))
    parquet(f"{out}/null-question.parquet", [rows[0], dict(rows[1], question=None)])
    parquet(f"{out}/outside.parquet", [rows[0], dict(rows[1], answers={"text": ["Santa Clara"], "answer_start": [99]})])
    mismatched = [dict(rows[0], answers={"text": ["Broncos won"], "answer_start": [0]}),
                  dict(rows[1], answers={"text": ["Santa Clara", "Clara"], "answer_start": [22, 29]})]
    parquet(f"{out}/mismatched.parquet", mismatched)
    write(f"{out}/mismatched.jsonl", lines(mismatched))
    renamed = [{"id": r["id"], "title": r["title"], "passage": r["context"], "query": r["question"], "gold": r["answers"]}
               for r in rows]
    parquet(f"{out}/renamed.parquet", renamed, schema=pa.schema(
        [pa.field({"context": "passage", "question": "query", "answers": "gold"}.get(f.name, f.name), f.type) for f in SCHEMA]))
    write(f"{out}/renamed.jsonl", lines(renamed))
    text = lines(rows + [dict(rows[1], id="c1")]).split("\n")
    text[2] = text[2][:40]  # line 3 cut short
    write(f"{out}/bad-line.jsonl", "\n".join(text))
    write(f"{out}/line-not-object.jsonl", lines(rows) + "[1, 2]\n")
    write(f"{out}/start-as-string.jsonl", lines([rows[0], dict(rows[1], answers={"text": ["x"], "answer_start": ["23"]})]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("squad")
    parser.add_argument("out")
    parser.add_argument("--articles", type=int, default=4)
    parser.add_argument("--v2")
    parser.add_argument("--only-formats", action="store_true", help="good/ up to squad.parquet: no Hub shards, cache, v2 or bad/")
    args = parser.parse_args()
    squad = first_articles(args.squad, args.articles)
    v2 = first_articles(args.v2, args.articles) if args.v2 else None
    good_files(os.path.join(args.out, "good"), squad, v2, args.only_formats)
    if not args.only_formats:
        bad_files(os.path.join(args.out, "bad"))


if __name__ == "__main__":
    main()
