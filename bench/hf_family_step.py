#!/usr/bin/env python3
"""HF's own QA model of a family, in a plain PyTorch training step, on the batches mpibert trains on.
Reads what `bench_train --dump-batches FILE` wrote: mpibert's config.json of the model (HF's keys)
and its dynamic-padded batches (input_ids, attention_mask, token_type_ids, start/end positions).
Builds AutoModelForQuestionAnswering.from_config(AutoConfig.for_model(**config)) with SDPA
attention where the family has it (eager otherwise), in train mode (the config's dropout, as
bench_train), fp32 (or bf16 autocast, as bench_train --bf16), on --device, and runs what
bench_train's step runs: forward, backward, clip_grad_norm 1.0, torch.optim.AdamW(lr 1e-4, weight
decay 0, fused or not as --optim), zero_grad; the first batch warms up, the others are timed (on a
GPU up to a synchronize). Prints one JSON object.
Usage: hf_family_step.py --batches FILE [--threads 2] [--optim adamw_torch_fused|adamw_torch]
                         [--device cpu|cuda] [--bf16]
"""
import argparse
import json
import time

import torch
import transformers


def build(config_json):
    config = dict(config_json)
    model_type = config.pop("model_type")
    for attn in ("sdpa", "eager"):
        try:
            hf_config = transformers.AutoConfig.for_model(model_type, attn_implementation=attn, **config)
            return transformers.AutoModelForQuestionAnswering.from_config(hf_config), attn
        except (ValueError, ImportError):  # the family has no SDPA attention
            continue
    raise SystemExit(f"hf_family_step: cannot build {model_type}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", required=True)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--optim", default="adamw_torch_fused", choices=["adamw_torch", "adamw_torch_fused"])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--bf16", action="store_true", help="bf16 autocast, as bench_train --bf16")
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    with open(args.batches) as f:
        dump = json.load(f)
    model, attn = build(dump["config"])
    model.to(device).train()
    # Token types only where the family embeds more than one (BERT, ELECTRA); mpibert's RoBERTa,
    # DistilBERT and DeBERTa-v3 ignore them or have none.
    with_types = getattr(model.config, "type_vocab_size", 0) > 1
    keys = ("input_ids", "attention_mask", "start_positions", "end_positions") + (("token_type_ids",) if with_types else ())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0, fused=args.optim == "adamw_torch_fused")
    samples, tokens = 0, 0
    for step, batch in enumerate(dump["batches"]):
        if step == 1:
            start = time.perf_counter()  # step 0 warms up
        inputs = {key: torch.tensor(batch[key], device=device) for key in keys}
        with torch.autocast(args.device, dtype=torch.bfloat16, enabled=args.bf16):
            loss = model(**inputs).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
        if step > 0:
            samples += inputs["input_ids"].shape[0]
            tokens += inputs["input_ids"].numel()
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    print(json.dumps({"samples_per_second": samples / seconds, "tokens_per_sample": tokens / samples,
                      "steps": len(dump["batches"]) - 1, "batch": len(dump["batches"][0]["input_ids"]),
                      "threads": args.threads, "attn_implementation": attn, "optim": args.optim,
                      "device": args.device, "precision": "bf16" if args.bf16 else "fp32",
                      "model_type": model.config.model_type,
                      "parameters": sum(p.numel() for p in model.parameters()),
                      "transformers": transformers.__version__, "torch": torch.__version__}))


if __name__ == "__main__":
    main()
