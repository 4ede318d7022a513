#!/usr/bin/env python3
"""The table of bench/families.sh from its JSON lines (bench_train --json, hf_family_step.py):
per family, the mean samples/s over the rounds (min–max where several) of mpibert's dynamic
padding and packed batches and of HF's model, mpibert dynamic over HF, and the family's mpibert
dynamic over bert-base's. A run missing from the records shows as "–".
Usage: families_report.py RECORDS.jsonl
"""
import json
import statistics
import sys

CHECKPOINTS = {"bert": "bert-base-uncased", "distilbert": "distilbert-base-uncased", "roberta": "roberta-base",
               "xlm-roberta": "xlm-roberta-base", "electra": "google/electra-base-discriminator",
               "deberta-v2": "microsoft/deberta-v3-base", "modernbert": "answerdotai/ModernBERT-base"}


def cell(xs):
    if not xs:
        return "–"
    return f"{statistics.mean(xs):.3f} ({min(xs):.3f}–{max(xs):.3f})" if len(xs) > 1 else f"{xs[0]:.3f}"


def ratio(a, b):
    return f"{statistics.mean(a) / statistics.mean(b):.2f}" if a and b else "–"


def main():
    rates, hf = {}, {}
    for line in open(sys.argv[1]):
        r = json.loads(line)
        key = "hf" if r["side"] == "hf" else r["variant"]
        rates.setdefault(r["family"], {}).setdefault(key, []).append(r["samples_per_second"])
        if r["side"] == "hf":
            hf[r["family"]] = r
    bert = rates.get("bert", {}).get("dynamic", [])
    print("| family (checkpoint, parameters) | mpibert dynamic | mpibert packed | HF, same config (attention) "
          "| mpibert/HF | family/bert-base |")
    print("|---|--:|--:|--:|--:|--:|")
    for family, r in rates.items():
        i = hf.get(family, {})
        size = f", {i['parameters'] / 1e6:.0f} M" if i else ""
        attention = f" ({i['attn_implementation']})" if i else ""
        print(f"| {family} ({CHECKPOINTS.get(family, '?')}{size}) | {cell(r.get('dynamic'))} | {cell(r.get('packed'))} "
              f"| {cell(r.get('hf'))}{attention} | {ratio(r.get('dynamic'), r.get('hf'))} "
              f"| {ratio(r.get('dynamic'), bert)} |")
    if hf:
        i = next(iter(hf.values()))
        print(f"\nsamples/s, mean over the rounds (min–max); batch {i['batch']}, {i['steps']} timed steps, "
              f"{i['threads']} threads, {i.get('precision', 'fp32')} on {i.get('device', 'cpu')}, {i['optim']}; mpibert/HF: mpibert's dynamic padding over HF's; "
              f"family/bert-base: mpibert's dynamic padding. transformers {i['transformers']}, torch {i['torch']}.")


if __name__ == "__main__":
    main()
