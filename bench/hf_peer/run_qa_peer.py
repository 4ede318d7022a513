"""mpibert's peer: HF transformers' Trainer + BertForQuestionAnswering as run_qa.py uses them.

    run_qa_peer.py features   --file SQUAD --vocab VOCAB
    run_qa_peer.py throughput --train-file SQUAD --vocab VOCAB --config CONFIG.json --batch B --steps N [--device cpu|cuda]
                              --threads T --padding full|dynamic [--group-by-length] [--bf16]
    run_qa_peer.py train      --train-file SQUAD --eval-file SQUAD --model DIR --output-dir DIR [...]
    run_qa_peer.py eval       --eval-file SQUAD --model DIR --output-dir DIR

The preprocessing has run_qa.py's semantics (prepare_train_features / prepare_validation_features:
the question left-stripped, truncation="only_second", overflowing windows with doc_stride, labels
at the CLS token when the answer is not fully inside a window), padded to max_seq_length as run_qa
does by default or dynamically (DataCollatorWithPadding, as run_qa with --pad_to_max_length False).
The post-processing is utils_qa.postprocess_qa_predictions' (n-best start/end pairs, max answer
length), scored with the official SQuAD v1.1 EM/F1. `train` leaves its output directory as run_qa.py
does (Trainer.save_model, save_metrics("train"), save_state, then save_metrics("eval") and
eval_predictions.json), which tools/compare reads as it reads any HF Trainer run.
"""

import argparse
import collections
import dataclasses
import gzip
import json
import os
import re
import string
import sys
import time

import numpy as np
import torch
import transformers
from transformers import (BertConfig, BertForQuestionAnswering, BertTokenizerFast, DataCollatorWithPadding,
                          Trainer, TrainerCallback, TrainingArguments, default_data_collator)

LABELS = ("start_positions", "end_positions")
MODEL_INPUTS = ("input_ids", "token_type_ids", "attention_mask")


# --- SQuAD -------------------------------------------------------------------------------------

def load_squad(path):
    """Examples as HF datasets' squad / squad_v2 loaders give them (answers empty when impossible)."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        data = json.load(f)["data"]
    examples = []
    for article in data:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                answers = [] if qa.get("is_impossible") else qa["answers"]
                examples.append({"id": qa["id"], "context": paragraph["context"], "question": qa["question"],
                                 "answers": {"text": [a["text"] for a in answers],
                                             "answer_start": [a["answer_start"] for a in answers]}})
    return examples


def tokenize_windows(tokenizer, examples, max_seq_length, doc_stride, pad_to_max_length):
    return tokenizer([e["question"].lstrip() for e in examples], [e["context"] for e in examples],
                     truncation="only_second", max_length=max_seq_length, stride=doc_stride,
                     return_overflowing_tokens=True, return_offsets_mapping=True,
                     padding="max_length" if pad_to_max_length else False)


def answer_span(offsets, sequence_ids, answers, cls_index):
    """run_qa's labels: the tokens covering the first answer, or CLS when it is not inside the window."""
    if not answers["answer_start"]:
        return cls_index, cls_index
    start_char = answers["answer_start"][0]
    end_char = start_char + len(answers["text"][0])
    first = 0
    while sequence_ids[first] != 1:
        first += 1
    last = len(sequence_ids) - 1
    while sequence_ids[last] != 1:
        last -= 1
    if not (offsets[first][0] <= start_char and offsets[last][1] >= end_char):
        return cls_index, cls_index
    # run_qa walks past the answer and steps back; kept as it is, including its edge cases.
    while first < len(offsets) and offsets[first][0] <= start_char:
        first += 1
    while offsets[last][1] >= end_char:
        last -= 1
    return first - 1, last + 1


def prepare_train_features(tokenizer, examples, max_seq_length=384, doc_stride=128, pad_to_max_length=True):
    tokenized = tokenize_windows(tokenizer, examples, max_seq_length, doc_stride, pad_to_max_length)
    features = []
    for i, offsets in enumerate(tokenized["offset_mapping"]):
        input_ids = tokenized["input_ids"][i]
        example = examples[tokenized["overflow_to_sample_mapping"][i]]
        start, end = answer_span(offsets, tokenized.sequence_ids(i), example["answers"],
                                 input_ids.index(tokenizer.cls_token_id))
        feature = {k: tokenized[k][i] for k in MODEL_INPUTS}
        feature.update(start_positions=start, end_positions=end)
        features.append(feature)
    return features


def prepare_validation_features(tokenizer, examples, max_seq_length=384, doc_stride=128, pad_to_max_length=True):
    tokenized = tokenize_windows(tokenizer, examples, max_seq_length, doc_stride, pad_to_max_length)
    features = []
    for i, offsets in enumerate(tokenized["offset_mapping"]):
        sequence_ids = tokenized.sequence_ids(i)
        feature = {k: tokenized[k][i] for k in MODEL_INPUTS}
        feature["example_id"] = examples[tokenized["overflow_to_sample_mapping"][i]]["id"]
        feature["offset_mapping"] = [o if sequence_ids[k] == 1 else None for k, o in enumerate(offsets)]
        features.append(feature)
    return features


def postprocess_predictions(examples, features, start_logits, end_logits, n_best_size=20, max_answer_length=30):
    """utils_qa.postprocess_qa_predictions for SQuAD v1.1: the best-scoring valid span per example."""
    by_example = collections.defaultdict(list)
    for index, feature in enumerate(features):
        by_example[feature["example_id"]].append(index)
    predictions = {}
    for example in examples:
        best_score, best_text = None, ""
        for index in by_example[example["id"]]:
            offsets = features[index]["offset_mapping"]
            starts = np.argsort(start_logits[index])[-1:-n_best_size - 1:-1]
            ends = np.argsort(end_logits[index])[-1:-n_best_size - 1:-1]
            for s in starts:
                for e in ends:
                    if s >= len(offsets) or e >= len(offsets) or offsets[s] is None or offsets[e] is None:
                        continue
                    if e < s or e - s + 1 > max_answer_length:
                        continue
                    score = start_logits[index][s] + end_logits[index][e]
                    if best_score is None or score > best_score:
                        best_score, best_text = score, example["context"][offsets[s][0]:offsets[e][1]]
        predictions[example["id"]] = best_text
    return predictions


def normalize_answer(text):
    text = "".join(ch for ch in text.lower() if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def f1_score(prediction, truth):
    pred, gold = normalize_answer(prediction).split(), normalize_answer(truth).split()
    common = collections.Counter(pred) & collections.Counter(gold)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(gold)
    return 2 * precision * recall / (precision + recall)


def squad_v1_scores(examples, predictions):
    """The official v1.1 scorer: EM and F1 in percent, each the maximum over the gold answers."""
    em = f1 = 0.0
    for example in examples:
        truths, prediction = example["answers"]["text"], predictions[example["id"]]
        em += max(float(normalize_answer(prediction) == normalize_answer(t)) for t in truths)
        f1 += max(f1_score(prediction, t) for t in truths)
    return 100.0 * em / len(examples), 100.0 * f1 / len(examples)


# --- Trainer -------------------------------------------------------------------------------------

class Features(torch.utils.data.Dataset):
    """Features restricted to the model's inputs (and labels): what the Trainer's collator sees."""

    def __init__(self, features, keys):
        self.items = [{k: f[k] for k in keys} for f in features]

    def __len__(self):
        return len(self.items)

    def __getitem__(self, index):
        return self.items[index]


class StepClock(TrainerCallback):
    """Wall time of each optimizer step's end, for throughput over the steps alone."""

    def __init__(self):
        self.step_ends = []

    def on_step_end(self, args, state, control, **kwargs):
        self.step_ends.append(time.perf_counter())


class CountingCollator:
    """Wraps the collator to record each batch it builds: its padded length and its samples' real
    lengths (attention_mask ones). Batches come in training order, so batch k is step k's."""

    def __init__(self, collate):
        self.collate, self.batches = collate, []

    def __call__(self, items):
        batch = self.collate(items)
        self.batches.append((batch["input_ids"].shape[1], batch["attention_mask"].sum(dim=1).tolist()))
        return batch


def training_flops(config):
    """mpibert's model FLOPs (src/model/flops.cpp): per real token and per pair of real tokens."""
    h, layers, i = config.hidden_size, config.num_hidden_layers, config.intermediate_size
    # Per layer: query, key, value and output (4 h^2), intermediate and output (2 h i); the QA
    # head's 2 h. A multiply-add is 2 FLOPs; forward + backward is 3 x forward.
    matmul_weights = layers * (4 * h * h + 2 * h * i) + 2 * h
    # Per layer and pair of tokens: Q K^T and the probabilities times V, h multiply-adds each.
    return 6 * matmul_weights, 6 * (layers * 2 * h)


def make_tokenizer(vocab):
    return BertTokenizerFast(vocab_file=vocab, do_lower_case=True)


def make_collator(tokenizer, padding):
    # run_qa: default_data_collator on max_length-padded features, DataCollatorWithPadding otherwise
    # (pad_to_multiple_of only with fp16).
    return default_data_collator if padding == "full" else DataCollatorWithPadding(tokenizer)


def training_arguments(args, output_dir, max_steps, logging_steps, group_by_length=None):
    group_by_length = args.group_by_length if group_by_length is None else group_by_length
    kwargs = dict(
        output_dir=output_dir, per_device_train_batch_size=args.batch, per_device_eval_batch_size=64,
        learning_rate=args.learning_rate, weight_decay=args.weight_decay, warmup_ratio=args.warmup_ratio,
        max_grad_norm=1.0, max_steps=max_steps, seed=args.seed, group_by_length=group_by_length,
        logging_steps=logging_steps, save_strategy="no", report_to="none", use_cpu=args.device == "cpu",
        bf16=args.bf16, dataloader_num_workers=0, disable_tqdm=True)
    # transformers 5 (a GPU machine's own, say) dropped two of them: warmup_steps takes the ratio
    # (below 1), and length grouping is gone.
    fields = {f.name for f in dataclasses.fields(TrainingArguments)}
    if "warmup_ratio" not in fields:
        kwargs["warmup_steps"] = kwargs.pop("warmup_ratio")
    if "group_by_length" not in fields:
        if kwargs.pop("group_by_length"):
            sys.exit("run_qa_peer: --group-by-length needs transformers 4.x (this is %s)" % transformers.__version__)
    return TrainingArguments(**kwargs)


def set_threads(threads):
    if threads:
        torch.set_num_threads(threads)


# --- commands ------------------------------------------------------------------------------------

def cmd_features(args):
    tokenizer = make_tokenizer(args.vocab)
    examples = load_squad(args.file)
    train = prepare_train_features(tokenizer, examples, args.max_seq_length, args.doc_stride)
    validation = prepare_validation_features(tokenizer, examples, args.max_seq_length, args.doc_stride)
    answerable = sum(1 for e in examples if e["answers"]["text"])
    labelled = sum(1 for f in train if f["start_positions"] != 0)
    print(json.dumps({"file": args.file, "examples": len(examples), "answerable_examples": answerable,
                      "train_features": len(train), "train_features_with_answer": labelled,
                      "eval_features": len(validation)}))


def cmd_throughput(args):
    """Training samples/s of N optimizer steps after one warm-up step, as Trainer.train() runs them."""
    set_threads(args.threads)
    tokenizer = make_tokenizer(args.vocab)
    features = prepare_train_features(tokenizer, load_squad(args.train_file), args.max_seq_length,
                                      args.doc_stride, pad_to_max_length=args.padding == "full")
    transformers.set_seed(args.seed)
    config = BertConfig.from_json_file(args.config)
    model = BertForQuestionAnswering(config)
    clock, collator = StepClock(), CountingCollator(make_collator(tokenizer, args.padding))
    trainer = Trainer(model=model, args=training_arguments(args, args.scratch, args.steps + 1, 10 ** 9),
                      train_dataset=Features(features, MODEL_INPUTS + LABELS), data_collator=collator,
                      callbacks=[clock])
    trainer.train()
    # The timed window runs from the warm-up step's end to the last step's: steps 2..N+1, whose
    # batches are the collator's 2nd..(N+1)th (the dataloader may have built one more ahead).
    seconds = clock.step_ends[-1] - clock.step_ends[0]
    timed = collator.batches[1:args.steps + 1]
    lengths = [n for _, real in timed for n in real]
    padded = sum(width * len(real) for width, real in timed)
    per_token, per_token_pair = training_flops(config)
    # As mpibert counts them: on real tokens only, whatever the padding computes besides.
    flops = per_token * sum(lengths) + per_token_pair * sum(n * n for n in lengths)
    variant = "grouped" if args.group_by_length else args.padding
    print(json.dumps({"samples_per_second": len(lengths) / seconds, "tokens_per_sample": padded / len(lengths),
                      "real_tokens_per_sample": sum(lengths) / len(lengths),
                      "model_flops_per_sample": flops / len(lengths), "model_flops_per_second": flops / seconds,
                      "precision": "bf16" if args.bf16 else "fp32", "steps": args.steps, "batch": args.batch,
                      "threads": torch.get_num_threads(), "variant": variant, "padding": args.padding,
                      "group_by_length": args.group_by_length}))


def evaluate(model, tokenizer, args):
    examples = load_squad(args.eval_file)
    features = prepare_validation_features(tokenizer, examples, args.max_seq_length, args.doc_stride,
                                           pad_to_max_length=args.padding == "full")
    # A Trainer of its own without group_by_length: with it, transformers 4.57 also length-groups
    # (shuffles) the evaluation order, and run_qa's post-processing, which maps predictions to
    # features by position, then scores each example with another feature's logits.
    predictor = Trainer(model=model, args=training_arguments(args, os.path.join(args.output_dir, "predict"), 1, 10 ** 9,
                                                             group_by_length=False),
                        data_collator=make_collator(tokenizer, args.padding))
    start = time.perf_counter()
    output = predictor.predict(Features(features, MODEL_INPUTS))
    seconds = time.perf_counter() - start
    start_logits, end_logits = output.predictions
    predictions = postprocess_predictions(examples, features, start_logits, end_logits)
    em, f1 = squad_v1_scores(examples, predictions)
    steps = -(-len(features) // predictor.args.per_device_eval_batch_size)
    metrics = {"eval_exact_match": em, "eval_f1": f1, "eval_runtime": seconds, "eval_samples": len(features),
               "eval_samples_per_second": len(features) / seconds, "eval_steps_per_second": steps / seconds}
    return metrics, predictions


def write_json(path, value):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(value, f, indent=2)
    os.replace(tmp, path)


def cmd_train(args):
    """Fine-tunes --model (HF checkpoint, BertModel or QA) and evaluates, leaving --output-dir as run_qa.py
    leaves its output_dir: the model, train/eval/all_results.json, trainer_state.json, eval_predictions.json."""
    set_threads(args.threads)
    os.makedirs(args.output_dir, exist_ok=True)
    tokenizer = make_tokenizer(args.vocab or os.path.join(args.model, "vocab.txt"))
    features = prepare_train_features(tokenizer, load_squad(args.train_file), args.max_seq_length,
                                      args.doc_stride, pad_to_max_length=args.padding == "full")
    transformers.set_seed(args.seed)
    model = BertForQuestionAnswering.from_pretrained(args.model)
    trainer = Trainer(model=model, args=training_arguments(args, args.output_dir, args.max_steps, args.logging_steps),
                      train_dataset=Features(features, MODEL_INPUTS + LABELS),
                      data_collator=make_collator(tokenizer, args.padding))
    train_output = trainer.train()
    # run_qa.py's order: the model, the train metrics and the state, then the evaluation's metrics.
    trainer.save_model()
    metrics = dict(train_output.metrics, train_samples=len(features))
    trainer.log_metrics("train", metrics)
    trainer.save_metrics("train", metrics)
    trainer.save_state()
    eval_metrics, predictions = evaluate(trainer.model, tokenizer, args)
    trainer.log(eval_metrics)  # as run_qa's QuestionAnsweringTrainer.evaluate: adds the epoch
    trainer.log_metrics("eval", eval_metrics)
    trainer.save_metrics("eval", eval_metrics)
    write_json(os.path.join(args.output_dir, "eval_predictions.json"), predictions)
    print("hf peer: EM %.2f F1 %.2f after %d steps in %.1f s; output_dir %s"
          % (eval_metrics["eval_exact_match"], eval_metrics["eval_f1"], train_output.global_step,
             metrics["train_runtime"], args.output_dir))


def cmd_eval(args):
    """Evaluates an HF QA model directory (an mpibert checkpoint too) with run_qa's pipeline."""
    set_threads(args.threads)
    os.makedirs(args.output_dir, exist_ok=True)
    tokenizer = make_tokenizer(args.vocab or os.path.join(args.model, "vocab.txt"))
    metrics, predictions = evaluate(BertForQuestionAnswering.from_pretrained(args.model), tokenizer, args)
    write_json(os.path.join(args.output_dir, "predictions.json"), predictions)
    print(json.dumps(metrics))


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p):
        p.add_argument("--vocab", help="vocab.txt (uncased WordPiece); default: the model's")
        p.add_argument("--max-seq-length", type=int, default=384)
        p.add_argument("--doc-stride", type=int, default=128)

    def training(p):
        p.add_argument("--train-file", required=True)
        p.add_argument("--batch", type=int, default=32, help="per step (one process)")
        p.add_argument("--learning-rate", type=float, default=1e-4)
        p.add_argument("--weight-decay", type=float, default=0.0)
        p.add_argument("--warmup-ratio", type=float, default=0.0)
        p.add_argument("--seed", type=int, default=42)
        p.add_argument("--padding", choices=["full", "dynamic"], default="full")
        p.add_argument("--group-by-length", action="store_true")
        p.add_argument("--bf16", action="store_true", help="TrainingArguments(bf16=True): bf16 autocast")
        p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
        p.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where the Trainer trains")

    p = sub.add_parser("features", help="feature counts of run_qa's train and validation preprocessing")
    common(p)
    p.add_argument("--file", required=True)
    p = sub.add_parser("throughput", help="training samples/s of a randomly initialized model")
    common(p)
    training(p)
    p.add_argument("--config", required=True, help="BertConfig JSON")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--scratch", default="/tmp/mpibert-hf-peer", help="the Trainer's output_dir (nothing is saved)")
    p = sub.add_parser("train", help="fine-tune a pretrained model and evaluate it")
    common(p)
    training(p)
    p.add_argument("--eval-file", required=True)
    p.add_argument("--model", required=True, help="HF model directory")
    p.add_argument("--output-dir", required=True)
    p.add_argument("--max-steps", type=int, required=True)
    p.add_argument("--logging-steps", type=int, default=10)
    p = sub.add_parser("eval", help="evaluate an HF QA model directory")
    common(p)
    p.add_argument("--eval-file", required=True)
    p.add_argument("--model", required=True, help="HF model directory with a QA head")
    p.add_argument("--output-dir", required=True, help="where predictions.json goes")
    p.add_argument("--padding", choices=["full", "dynamic"], default="dynamic")
    p.add_argument("--threads", type=int, default=0)
    args = parser.parse_args(argv)
    if args.command == "eval":  # what training_arguments reads
        args.batch, args.learning_rate, args.weight_decay, args.warmup_ratio, args.seed = 1, 0.0, 0.0, 0.0, 42
        args.group_by_length, args.bf16 = False, False
    if args.command in ("features", "throughput") and not args.vocab:
        parser.error("--vocab is required")
    return args


def main(argv):
    args = parse_args(argv)
    {"features": cmd_features, "throughput": cmd_throughput, "train": cmd_train, "eval": cmd_eval}[args.command](args)


if __name__ == "__main__":
    main(sys.argv[1:])
