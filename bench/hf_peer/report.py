"""bench/compare_hf.sh's tables: throughput of mpibert and HF's Trainer, and feature counts.

    report.py THROUGHPUT.jsonl FEATURES.jsonl

THROUGHPUT lines: {"side": mpibert|hf, "preset", "variant" (mpibert: full|dynamic|grouped) or
"padding"/"group_by_length" (hf), "threads", "batch", "samples_per_second", "tokens_per_sample"},
one per run and round. Prints Markdown on stdout (standard library only).
"""

import collections
import json
import statistics
import sys

COLUMNS = [("mpibert", "full"), ("mpibert", "dynamic"), ("mpibert", "grouped"), ("hf", "full"), ("hf", "grouped")]
TITLES = {("mpibert", "full"): "mpibert full", ("mpibert", "dynamic"): "mpibert dynamic",
          ("mpibert", "grouped"): "mpibert grouped", ("hf", "full"): "HF run_qa (full)",
          ("hf", "grouped"): "HF dynamic + group_by_length"}


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def variant_of(record):
    if record["side"] == "mpibert":
        return record["variant"]
    return "grouped" if record["group_by_length"] else record["padding"]


def cell(values):
    mean = statistics.mean(values)
    spread = (max(values) - min(values)) / mean * 100 if len(values) > 1 else 0.0
    return "%.2f (±%.0f%%)" % (mean, spread / 2) if len(values) > 1 else "%.2f" % mean


def throughput_table(records):
    runs = collections.defaultdict(list)
    tokens = collections.defaultdict(list)
    for r in records:
        key = (r["preset"], r["batch"], r["threads"], r["side"], variant_of(r))
        runs[key].append(r["samples_per_second"])
        tokens[key].append(r["tokens_per_sample"])
    configs = sorted({k[:3] for k in runs}, key=lambda c: (c[0] != "small", c[2]))
    lines = ["| config | batch | threads | " + " | ".join(TITLES[c] for c in COLUMNS)
             + " | mpibert / HF, equal padding | mpibert best / HF best |",
             "|---|--:|--:|" + "--:|" * (len(COLUMNS) + 2)]
    for preset, batch, threads in configs:
        means = {c: statistics.mean(runs[(preset, batch, threads) + c]) for c in COLUMNS if (preset, batch, threads) + c in runs}
        cells = [cell(runs[(preset, batch, threads) + c]) if c in means else "\u2013" for c in COLUMNS]
        equal = means[("mpibert", "full")] / means[("hf", "full")]
        best = max(v for (side, _), v in means.items() if side == "mpibert") / \
            max(v for (side, _), v in means.items() if side == "hf")
        lines.append("| %s | %d | %d | %s | %.2f× | %.2f× |" % (preset, batch, threads, " | ".join(cells), equal, best))
    token_line = ", ".join("%s %.0f" % (TITLES[c], statistics.mean(v))
                           for c in COLUMNS for k, v in tokens.items() if k[3:] == c and k[0] == "small" and k[2] == 1)
    return "\n".join(lines) + "\n\nTraining samples/s (mean over rounds, ± half the spread). Padded tokens " \
        "per sample (small config, 1 thread): " + token_line + "."


def feature_table(counts):
    lines = ["| file | examples | mpibert train features | HF prepare_train_features | mpibert eval features "
             "| HF prepare_validation_features | train features labelled with an answer (mpibert / HF) |",
             "|---|--:|--:|--:|--:|--:|--:|"]
    for name in sorted({c["file"] for c in counts}):
        ours = {c["split"]: c for c in counts if c["file"] == name and c["side"] == "mpibert"}
        theirs = next(c for c in counts if c["file"] == name and c["side"] == "hf")
        lines.append("| %s | %d | %d | %d | %d | %d | %s / %d |" % (
            name, theirs["examples"], ours["train"]["features"], theirs["train"], ours["eval"]["features"],
            theirs["eval"], ours["train"]["with_answer"], theirs["with_answer"]))
    return "\n".join(lines)


def main(argv):
    print("## Training throughput: mpibert and HF's Trainer\n")
    print(throughput_table(read_jsonl(argv[1])))
    print("\n## Features on the official dev sets (seq 384, stride 128)\n")
    print(feature_table(read_jsonl(argv[2])))


if __name__ == "__main__":
    main(sys.argv)
