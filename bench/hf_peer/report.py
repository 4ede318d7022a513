"""bench/compare_hf.sh's tables: throughput and MFU of mpibert and HF's Trainer, and feature counts.

    report.py THROUGHPUT.jsonl [FEATURES.jsonl]

THROUGHPUT lines: {"side": mpibert|hf, "preset", "variant" (full|dynamic|grouped, mpibert also
packed; older hf lines: "padding"/"group_by_length"), "precision" (fp32|bf16), "threads", "batch",
"samples_per_second", "tokens_per_sample", "real_tokens_per_sample", "model_flops_per_second",
mpibert's also "matmul_flops_per_second"}, one per run and round. Prints Markdown on stdout
(standard library only); a cell without runs is "–".
"""

import collections
import json
import statistics
import sys

MISSING = "\u2013"
COLUMNS = [("mpibert", "full"), ("mpibert", "dynamic"), ("mpibert", "grouped"), ("mpibert", "packed"),
           ("hf", "full"), ("hf", "dynamic"), ("hf", "grouped")]
TITLES = {("mpibert", "full"): "mpibert full", ("mpibert", "dynamic"): "mpibert dynamic",
          ("mpibert", "grouped"): "mpibert grouped", ("mpibert", "packed"): "mpibert packed",
          ("hf", "full"): "HF run_qa (full)", ("hf", "dynamic"): "HF dynamic",
          ("hf", "grouped"): "HF dynamic + group_by_length"}


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def variant_of(record):
    if "variant" in record:
        return record["variant"]
    return "grouped" if record.get("group_by_length") else record["padding"]


def precision_of(record):
    return record.get("precision", "fp32")  # lines from before bf16 was measured


def cell(values):
    if not values:
        return MISSING
    mean = statistics.mean(values)
    if len(values) == 1:
        return "%.2f" % mean
    spread = (max(values) - min(values)) / mean * 100 if mean else 0.0
    return "%.2f (±%.0f%%)" % (mean, spread / 2)


def group(records):
    """Runs by row (preset, batch, threads, precision) and column (side, variant)."""
    runs = collections.defaultdict(lambda: collections.defaultdict(list))
    for r in records:
        runs[(r["preset"], r["batch"], r["threads"], precision_of(r))][(r["side"], variant_of(r))].append(r)
    rows = sorted(runs, key=lambda k: (k[0] != "small", k[0], k[1], k[2], k[3] != "fp32", k[3]))
    return runs, rows


def values(runs, key):
    return [r[key] for r in runs if r.get(key) is not None]


def best(means, side):
    """The fastest variant of a side and its mean samples/s, or None."""
    mine = [(v, variant) for (s, variant), v in means.items() if s == side]
    return max(mine) if mine else None


def throughput_table(runs, rows):
    lines = ["| config | batch | threads | precision | " + " | ".join(TITLES[c] for c in COLUMNS)
             + " | mpibert best / HF best | best variants (mpibert / HF) |",
             "|---|--:|--:|---|" + "--:|" * (len(COLUMNS) + 1) + "---|"]
    for row in rows:
        by_column = runs[row]
        samples = {c: values(by_column.get(c, []), "samples_per_second") for c in COLUMNS}
        means = {c: statistics.mean(v) for c, v in samples.items() if v}
        ours, theirs = best(means, "mpibert"), best(means, "hf")
        ratio = "%.2f×" % (ours[0] / theirs[0]) if ours and theirs else MISSING
        names = "%s / %s" % (ours[1] if ours else MISSING, theirs[1] if theirs else MISSING)
        lines.append("| %s | %d | %d | %s | %s | %s | %s |" % (
            row[0], row[1], row[2], row[3], " | ".join(cell(samples[c]) for c in COLUMNS), ratio, names))
    return "\n".join(lines) + "\n\nTraining samples/s (mean over rounds, ± half the spread).\n\n" + token_lines(runs, rows)


def token_lines(runs, rows):
    """Padded (and real) tokens per sample per preset and batch: they depend on the variant only."""
    lines = []
    for preset, batch in sorted({row[:2] for row in rows}, key=lambda c: (c[0] != "small", c)):
        parts = []
        for c in COLUMNS:
            records = [r for row in rows if row[:2] == (preset, batch) for r in runs[row].get(c, [])]
            padded, real = values(records, "tokens_per_sample"), values(records, "real_tokens_per_sample")
            if padded:
                parts.append("%s %.0f" % (TITLES[c], statistics.mean(padded))
                             + (" (%.0f real)" % statistics.mean(real) if real else ""))
        lines.append("Padded tokens per sample, %s batch %d: %s." % (preset, batch, ", ".join(parts) or MISSING))
    return "\n".join(lines)


def gemm_rates(records):
    """mpibert's measured square-GEMM rate per (threads, precision): the one MFU denominator of both sides."""
    rates = collections.defaultdict(list)
    for r in records:
        if r["side"] == "mpibert" and r.get("matmul_flops_per_second"):
            rates[(r["threads"], precision_of(r))].append(r["matmul_flops_per_second"])
    return {k: (statistics.mean(v), len(v)) for k, v in rates.items()}


def mfu_table(runs, rows, rates):
    lines = ["| config | batch | threads | precision | " + " | ".join(TITLES[c] for c in COLUMNS) + " |",
             "|---|--:|--:|---|" + "--:|" * len(COLUMNS)]
    for row in rows:
        rate = rates.get(row[2:])
        cells = []
        for c in COLUMNS:
            achieved = values(runs[row].get(c, []), "model_flops_per_second")
            cells.append("%.1f%%" % (100 * statistics.mean(achieved) / rate[0]) if achieved and rate else MISSING)
        lines.append("| %s | %d | %d | %s | %s |" % (row[0], row[1], row[2], row[3], " | ".join(cells)))
    gemm = ["| threads | precision | square GEMM, GFLOP/s | bench_train runs |", "|--:|---|--:|--:|"]
    for (threads, precision), (rate, count) in sorted(rates.items(), key=lambda i: (i[0][0], i[0][1] != "fp32")):
        gemm.append("| %d | %s | %.1f | %d |" % (threads, precision, rate / 1e9, count))
    return "\n".join(lines) + "\n\nMFU: model FLOPs on real tokens (mpibert's count, the same for both sides) " \
        "per second, mean over rounds, over the square-GEMM rate bench_train measured for the same threads " \
        "and precision (mean over its runs):\n\n" + "\n".join(gemm)


def feature_table(counts):
    lines = ["| file | examples | mpibert train features | HF prepare_train_features | mpibert eval features "
             "| HF prepare_validation_features | train features labelled with an answer (mpibert / HF) |",
             "|---|--:|--:|--:|--:|--:|--:|"]

    def show(value):
        return MISSING if value is None else str(value)

    for name in sorted({c["file"] for c in counts}):
        ours = {c["split"]: c for c in counts if c["file"] == name and c["side"] == "mpibert"}
        theirs = next((c for c in counts if c["file"] == name and c["side"] == "hf"), {})
        train, evaluation = ours.get("train", {}), ours.get("eval", {})
        examples = theirs.get("examples", train.get("examples"))
        lines.append("| %s | %s | %s | %s | %s | %s | %s / %s |" % (
            name, show(examples), show(train.get("features")), show(theirs.get("train")),
            show(evaluation.get("features")), show(theirs.get("eval")), show(train.get("with_answer")),
            show(theirs.get("with_answer"))))
    return "\n".join(lines)


def main(argv):
    records = read_jsonl(argv[1])
    runs, rows = group(records)
    print("## Training throughput: mpibert and HF's Trainer\n")
    print(throughput_table(runs, rows))
    print("\n## Model FLOPs utilization\n")
    print(mfu_table(runs, rows, gemm_rates(records)))
    if len(argv) > 2:
        print("\n## Features on the official dev sets (seq 384, stride 128)\n")
        print(feature_table(read_jsonl(argv[2])))


if __name__ == "__main__":
    main(sys.argv)
