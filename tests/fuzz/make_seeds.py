#!/usr/bin/env python3
"""Writes the fuzzers' seed inputs (tests/fuzz/corpus/HARNESS/seed-*) from the bundled data and
fixtures: small, valid instances of each format, so that fuzzing starts inside the format. Inputs
of findings (finding-*) are kept beside them by hand. Run from anywhere with Python 3; the Parquet
seeds need pyarrow (.venv/bin/python3 tests/fuzz/make_seeds.py)."""
import gzip, json, os, random, struct

root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
corpus = os.path.join(root, "tests", "fuzz", "corpus")
separator = b"\n=====\n"  # fuzz_input.hpp's kSeparator


def seed(harness, name, data):
    os.makedirs(os.path.join(corpus, harness), exist_ok=True)
    with open(os.path.join(corpus, harness, "seed-" + name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def small_squad(path, paragraphs=2, questions=2):
    data = json.load(gzip.open(os.path.join(root, "data_prep", "data", "squad", path)))
    article = data["data"][0]
    article["paragraphs"] = article["paragraphs"][:paragraphs]
    for paragraph in article["paragraphs"]:
        paragraph["qas"] = paragraph["qas"][:questions]
        paragraph["context"] = paragraph["context"][:400]
        for qa in paragraph["qas"]:
            qa["answers"] = [a for a in qa["answers"] if a["answer_start"] + len(a["text"]) <= 400][:2]
            if "plausible_answers" in qa:
                del qa["plausible_answers"]
            if not qa["answers"] and not qa.get("is_impossible", False):
                qa["is_impossible"] = True
    data["data"] = [article]
    return data


v1, v2 = small_squad("dev-v1.1.json.gz"), small_squad("dev-v2.0.json.gz")
for label, data in (("v1.1", v1), ("v2.0", v2)):
    text = json.dumps(data, ensure_ascii=False)
    seed("fuzz_squad", label + ".json", text)
    seed("fuzz_squad", label + ".json.gz", gzip.compress(text.encode(), mtime=0))


def records(data):
    """run_qa.py's records (the Hub's rows) of a nested SQuAD document."""
    return [{"id": qa["id"], "title": article["title"], "context": paragraph["context"], "question": qa["question"],
             "answers": {"text": [a["text"] for a in qa["answers"]], "answer_start": [a["answer_start"] for a in qa["answers"]]}}
            for article in data["data"] for paragraph in article["paragraphs"] for qa in paragraph["qas"]]


for label, data in (("v1.1", v1), ("v2.0", v2)):
    lines = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in records(data))
    seed("fuzz_squad_jsonl", label + ".jsonl", lines)
    seed("fuzz_squad_jsonl", label + ".jsonl.gz", gzip.compress(lines.encode(), mtime=0))
    seed("fuzz_question_lines", label + ".jsonl", lines)  # `predict --questions` takes run_qa's records as they are
seed("fuzz_question_lines", "pipeline.jsonl", '{"question": "Who?", "context": "Ann did."}\n\n{"id": "2", "question": "", "context": ""}\n')
try:  # the Parquet seeds need pyarrow (the .venv's Python has it); uncompressed, so that mutations reach the values
    import io
    import pyarrow as pa
    import pyarrow.parquet as pq
    answers = pa.struct([("text", pa.list_(pa.string())), ("answer_start", pa.list_(pa.int32()))])
    schema = pa.schema([("id", pa.string()), ("title", pa.string()), ("context", pa.string()), ("question", pa.string()),
                        ("answers", answers)])
    for label, data in (("v1.1", v1), ("v2.0", v2)):
        for compression in ("none", "snappy"):
            out = io.BytesIO()
            pq.write_table(pa.Table.from_pylist(records(data), schema=schema), out, compression=compression, row_group_size=3)
            seed("fuzz_squad_parquet", f"{label}-{compression}.parquet", out.getvalue())
except ImportError:
    print("make_seeds: no pyarrow here: the Parquet seeds (corpus/fuzz_squad_parquet) are left as they are")

# vocab.txt: the specials and enough pieces to tokenize the harness's sentence.
vocab = open(os.path.join(root, "data_prep", "data", "bert-base-uncased", "vocab.txt"), encoding="utf-8").read().split("\n")
seed("fuzz_vocab", "bert-head.txt", "\n".join(vocab[:110] + vocab[1996:2100] + ["##s", "stadium", "denver"]) + "\n")
seed("fuzz_vocab", "specials-only.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\n")

for i, line in enumerate(open(os.path.join(root, "tests", "fixtures", "tokenizer", "edge-cases.jsonl"), encoding="utf-8")):
    seed("fuzz_tokenizer", f"edge-{i:02d}.txt", json.loads(line)["text"])
seed("fuzz_tokenizer", "context.txt", v1["data"][0]["paragraphs"][0]["context"])

# tokenizer.json: small files of every component family the reader knows (HF's layout).
def template(cls, sep, pair_type=1):
    return {"type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": cls, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                       {"SpecialToken": {"id": sep, "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": cls, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": sep, "type_id": 0}}, {"Sequence": {"id": "B", "type_id": pair_type}},
                     {"SpecialToken": {"id": sep, "type_id": pair_type}}],
            "special_tokens": {cls: {"id": cls, "ids": [2], "tokens": [cls]}, sep: {"id": sep, "ids": [3], "tokens": [sep]}}}


def added(tokens):
    return [{"id": i, "content": t, "single_word": False, "lstrip": t == "<mask>", "rstrip": False, "normalized": False,
             "special": True} for i, t in tokens]


words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "where", "is", "the", "den", "##ver", "bro", "##ncos", "'", "?", "stadium",
         "北", "京", "ca", "##fe", "19", "##99", "x"]
seed("fuzz_tokenizer_json", "wordpiece.json", json.dumps({
    "version": "1.0", "truncation": None, "padding": None, "added_tokens": added(list(enumerate(words[:5]))),
    "normalizer": {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True, "strip_accents": None,
                   "lowercase": True},
    "pre_tokenizer": {"type": "BertPreTokenizer"}, "post_processor": template("[CLS]", "[SEP]"), "decoder": None,
    "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##", "max_input_chars_per_word": 100,
              "vocab": {w: i for i, w in enumerate(words)}}}, ensure_ascii=False))
letters = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"] + [chr(c) for c in range(33, 127)] + ["\u0120", "\u0120t", "he", "\u0120the"]
seed("fuzz_tokenizer_json", "byte-level-bpe.json", json.dumps({
    "added_tokens": added(list(enumerate(letters[:5]))), "normalizer": {"type": "NFC"},
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
    "post_processor": {"type": "RobertaProcessing", "sep": ["</s>", 2], "cls": ["<s>", 0], "trim_offsets": True,
                       "add_prefix_space": False},
    "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "", "end_of_word_suffix": "",
              "fuse_unk": False, "byte_fallback": False, "ignore_merges": False, "vocab": {w: i for i, w in enumerate(letters)},
              "merges": [["\u0120", "t"], ["h", "e"], ["\u0120t", "he"]]}}, ensure_ascii=False))
pieces = [["<unk>", 0.0], ["[CLS]", 0.0], ["[SEP]", 0.0], ["\u2581", -2.0], ["\u2581the", -3.0], ["s", -4.0], ["ta", -5.0],
          ["dium", -5.5], ["\u2581x", -6.0]] + [[chr(c), -8.0] for c in range(97, 123)]
seed("fuzz_tokenizer_json", "unigram.json", json.dumps({
    "added_tokens": added([(1, "[CLS]"), (2, "[SEP]")]),
    "normalizer": {"type": "Sequence", "normalizers": [
        {"type": "Strip", "strip_left": True, "strip_right": True}, {"type": "NFKC"}, {"type": "Lowercase"},
        {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}, {"type": "Prepend", "prepend": "\u2581"},
        {"type": "StripAccents"}]},
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "Punctuation", "behavior": "Isolated"}, {"type": "Digits", "individual_digits": True},
        {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True}]},
    "post_processor": template("[CLS]", "[SEP]"),
    "model": {"type": "Unigram", "unk_id": 0, "vocab": pieces, "byte_fallback": False}}, ensure_ascii=False))
seed("fuzz_tokenizer_json", "wordlevel-split.json", json.dumps({
    "added_tokens": [], "normalizer": {"type": "Replace", "pattern": {"String": "'"}, "content": " "},
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "\\s+"}, "behavior": "Removed", "invert": False},
        {"type": "Whitespace"}, {"type": "WhitespaceSplit"}]},
    "post_processor": {"type": "Sequence", "processors": [{"type": "ByteLevel", "trim_offsets": True},
                                                          {"type": "BertProcessing", "sep": ["[SEP]", 1], "cls": ["[CLS]", 0]}]},
    "model": {"type": "WordLevel", "unk_token": "[UNK]", "vocab": {"[CLS]": 0, "[SEP]": 1, "[UNK]": 2, "where": 3, "is": 4}}}))

for name in ("configs/small-bert.json", "tests/fixtures/model/config.json"):
    seed("fuzz_model_config", os.path.basename(os.path.dirname(name)) + ".json", open(os.path.join(root, name)).read())

seed("fuzz_train_config", "main_job.toml", open(os.path.join(root, "configs", "main_job.toml")).read())
seed("fuzz_train_config", "pretrained_minilm.toml", open(os.path.join(root, "configs", "pretrained_minilm.toml")).read())


def safetensors(tensors, metadata=None):
    """tensors: [(name, dtype, shape, raw bytes)]"""
    header, offset = {}, 0
    if metadata:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(raw for *_, raw in tensors)


seed("fuzz_safetensors", "small.safetensors", safetensors(
    [("bert.embeddings.word_embeddings.weight", "F32", [4, 2], struct.pack("<8f", *range(8))),
     ("qa_outputs.bias", "BF16", [2], b"\x80\x3f\x00\x40"),
     ("position_ids", "I64", [1, 3], struct.pack("<3q", 0, 1, 2)),
     ("mask", "BOOL", [2], b"\x01\x00")], {"format": "pt"}))

manifest = {"format": "mpibert-shards", "format_version": 2, "tool_version": "0.1.0", "split": "train",
            "parameters": {"max_seq_length": 384, "doc_stride": 128, "max_query_length": 0},
            "input": {"path": "dev-v1.1.json.gz", "sha256": "0" * 64},
            "tokenizer": {"path": "vocab.txt", "sha256": "1" * 64, "kind": "WordPiece (vocab.txt)", "vocab_size": 30522,
                          "pad_id": 0, "context_type_id": 1},
            "num_examples": 5, "num_features": 7,
            "shards": [{"file": "shard-00000-of-00002.h5", "first_example": 0, "num_examples": 3, "num_features": 4},
                       {"file": "shard-00001-of-00002.h5", "first_example": 3, "num_examples": 2, "num_features": 3}]}
seed("fuzz_manifest", "two-shards.json", json.dumps(manifest, indent=2))

state = {"global_step": 4, "epoch": 0, "micro_batches_done_in_epoch": 4, "world_size": 2, "strategy": "ddp",
         "best_metric": 12.5, "best_metric_name": "eval_f1", "best_step": 4, "total_flos": 1.5e9,
         "model_config": {"hidden_size": 32}, "loss_history": [{"step": 2, "loss": 5.9}, {"step": 4, "loss": 5.7}]}
rank_file = safetensors([("cpu_rng_state", "U8", [5056], bytes(range(256)) * 19 + bytes(192))])
sums = {"format": "mpibert-checkpoint-checksums", "algorithm": "crc32",
        "files": {"trainer_state.json": {"bytes": 10, "crc32": "0123abcd"},
                  "rank-0.safetensors": {"bytes": len(rank_file), "crc32": "%08x" % __import__("zlib").crc32(rank_file)}}}
seed("fuzz_checkpoint", "state-sums-rank.bin", json.dumps(state).encode() + separator + json.dumps(sums).encode() + separator + rank_file)

context = v1["data"][0]["paragraphs"][0]
dataset = {"version": "1.1", "data": [{"title": "t", "paragraphs": [context]}]}
predictions = {qa["id"]: qa["answers"][0]["text"] for qa in context["qas"]}
seed("fuzz_score", "v1.1.bin", json.dumps(dataset).encode() + separator + json.dumps(predictions).encode())
context2 = v2["data"][0]["paragraphs"][0]
dataset2 = {"version": "v2.0", "data": [{"title": "t", "paragraphs": [context2]}]}
predictions2 = {qa["id"]: (qa["answers"][0]["text"] if qa["answers"] else "") for qa in context2["qas"]}
na_probs = {qa["id"]: (0.1 if qa["answers"] else 1) for qa in context2["qas"]}
seed("fuzz_score", "v2.0-na.bin", json.dumps(dataset2).encode() + separator + json.dumps(predictions2).encode() + separator +
     json.dumps(na_probs).encode())

# fuzz_shard reads its input as choices (FuzzedDataProvider), not as a file: any bytes start it.
seed("fuzz_shard", "random-512", bytes(random.Random(0).randrange(1, 256) for _ in range(512)))
