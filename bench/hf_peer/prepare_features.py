"""run_qa.py's train-feature preparation as its users run it: the dataset through
datasets.map(prepare_train_features, batched=True) in one process, with a fast tokenizer from
AutoTokenizer. Prints one line: the tokenizer, the features, the best of REPEATS seconds.

    .venv/bin/python bench/hf_peer/prepare_features.py SQUAD_JSON TOKENIZER_DIR [REPEATS]

RAYON_NUM_THREADS=1 keeps HF's tokenizer on one core (bench/prep_tokenizers.sh sets it)."""
import gzip
import json
import sys
import time

import datasets
import transformers

MAX_LENGTH, STRIDE = 384, 128


def records(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        data = json.load(f)["data"]
    for article in data:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                yield {"id": qa["id"], "title": article["title"], "context": paragraph["context"], "question": qa["question"],
                       "answers": {"text": [a["text"] for a in qa["answers"]],
                                   "answer_start": [a["answer_start"] for a in qa["answers"]]}}


def main():
    path, tokenizer_dir = sys.argv[1], sys.argv[2]
    repeats = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    tokenizer = transformers.AutoTokenizer.from_pretrained(tokenizer_dir)
    pad_on_right = tokenizer.padding_side == "right"
    dataset = datasets.Dataset.from_list(list(records(path)))

    def prepare_train_features(examples):  # run_qa.py's, verbatim but for the column names
        examples["question"] = [q.lstrip() for q in examples["question"]]
        tokenized = tokenizer(examples["question" if pad_on_right else "context"], examples["context" if pad_on_right else "question"],
                              truncation="only_second" if pad_on_right else "only_first", max_length=MAX_LENGTH, stride=STRIDE,
                              return_overflowing_tokens=True, return_offsets_mapping=True, padding="max_length")
        sample_mapping = tokenized.pop("overflow_to_sample_mapping")
        offset_mapping = tokenized.pop("offset_mapping")
        tokenized["start_positions"], tokenized["end_positions"] = [], []
        for i, offsets in enumerate(offset_mapping):
            input_ids = tokenized["input_ids"][i]
            cls_index = input_ids.index(tokenizer.cls_token_id) if tokenizer.cls_token_id in input_ids else 0
            sequence_ids = tokenized.sequence_ids(i)
            answers = examples["answers"][sample_mapping[i]]
            if len(answers["answer_start"]) == 0:
                tokenized["start_positions"].append(cls_index)
                tokenized["end_positions"].append(cls_index)
                continue
            start_char = answers["answer_start"][0]
            end_char = start_char + len(answers["text"][0])
            token_start = 0
            while sequence_ids[token_start] != (1 if pad_on_right else 0):
                token_start += 1
            token_end = len(input_ids) - 1
            while sequence_ids[token_end] != (1 if pad_on_right else 0):
                token_end -= 1
            if not (offsets[token_start][0] <= start_char and offsets[token_end][1] >= end_char):
                tokenized["start_positions"].append(cls_index)
                tokenized["end_positions"].append(cls_index)
            else:
                while token_start < len(offsets) and offsets[token_start][0] <= start_char:
                    token_start += 1
                tokenized["start_positions"].append(token_start - 1)
                while offsets[token_end][1] >= end_char:
                    token_end -= 1
                tokenized["end_positions"].append(token_end + 1)
        return tokenized

    best, features = float("inf"), 0
    for _ in range(repeats):
        start = time.perf_counter()
        prepared = dataset.map(prepare_train_features, batched=True, remove_columns=dataset.column_names,
                               load_from_cache_file=False, keep_in_memory=True)
        best = min(best, time.perf_counter() - start)
        features = len(prepared)
    print(f"HF datasets.map  {tokenizer_dir:45s} features {features:6d}  best of {repeats}: {best:6.3f} s  {features / best:8.0f} features/s")


if __name__ == "__main__":
    datasets.disable_progress_bars()
    main()
