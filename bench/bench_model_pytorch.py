#!/usr/bin/env python3
"""The Python PyTorch baseline for bench_model: the same BERT QA math as HF's
BertForQuestionAnswering (separate Q/K/V, erf GELU, additive float32-min mask), the same
settings, on the torch that mpibert builds against (.venv/bin/python3: the same LibTorch).
Usage: bench_model_pytorch.py --preset base|small [--batch B] [--seq 384] [--threads T] [--steps N]
"""
import argparse
import math
import resource
import time

import torch
from torch import nn


class Layer(nn.Module):
    def __init__(self, hidden, heads, intermediate, dropout):
        super().__init__()
        self.heads, self.head_size = heads, hidden // heads
        self.query, self.key, self.value = (nn.Linear(hidden, hidden) for _ in range(3))
        self.attention_dense, self.attention_norm = nn.Linear(hidden, hidden), nn.LayerNorm(hidden, eps=1e-12)
        self.intermediate = nn.Linear(hidden, intermediate)
        self.output_dense, self.output_norm = nn.Linear(intermediate, hidden), nn.LayerNorm(hidden, eps=1e-12)
        self.dropout = nn.Dropout(dropout)

    def split(self, x):
        b, s, _ = x.shape
        return x.view(b, s, self.heads, self.head_size).permute(0, 2, 1, 3)

    def forward(self, x, mask):
        q, k, v = self.split(self.query(x)), self.split(self.key(x)), self.split(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_size) + mask
        context = torch.matmul(self.dropout(torch.softmax(scores, -1)), v)
        context = context.permute(0, 2, 1, 3).reshape(x.shape)
        attended = self.attention_norm(self.dropout(self.attention_dense(context)) + x)
        hidden = nn.functional.gelu(self.intermediate(attended))
        return self.output_norm(self.dropout(self.output_dense(hidden)) + attended)


class BertQA(nn.Module):
    def __init__(self, vocab, hidden, layers, heads, intermediate, dropout=0.1):
        super().__init__()
        self.words = nn.Embedding(vocab, hidden, padding_idx=0)
        self.positions, self.types = nn.Embedding(512, hidden), nn.Embedding(2, hidden)
        self.norm, self.dropout = nn.LayerNorm(hidden, eps=1e-12), nn.Dropout(dropout)
        self.layers = nn.ModuleList(Layer(hidden, heads, intermediate, dropout) for _ in range(layers))
        self.qa = nn.Linear(hidden, 2)

    def forward(self, ids, types, mask, starts, ends):
        x = self.words(ids) + self.types(types)
        x = self.dropout(self.norm(x + self.positions(torch.arange(ids.shape[1]))))
        additive = (1.0 - mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
        for layer in self.layers:
            x = layer(x, additive)
        start, end = self.qa(x).unbind(-1)
        loss = nn.functional.cross_entropy(start, starts) + nn.functional.cross_entropy(end, ends)
        return loss / 2


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--preset", choices=["base", "small"], default="small")
    parser.add_argument("--batch", type=int, default=0)
    parser.add_argument("--seq", type=int, default=384)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    sizes = dict(hidden=768, layers=12, heads=12, intermediate=3072) if args.preset == "base" else \
        dict(hidden=128, layers=2, heads=2, intermediate=512)
    batch = args.batch or (2 if args.preset == "base" else 32)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = BertQA(30522, **sizes).train()
    ids = torch.randint(1000, 30522, (batch, args.seq))
    types = torch.cat([torch.zeros(batch, 32, dtype=torch.long), torch.ones(batch, args.seq - 32, dtype=torch.long)], 1)
    mask = torch.ones(batch, args.seq, dtype=torch.long)
    starts = torch.randint(32, args.seq, (batch,))

    def step():
        model.zero_grad()
        model(ids, types, mask, starts, starts).backward()

    step()
    begin = time.perf_counter()
    for _ in range(args.steps):
        step()
    seconds = time.perf_counter() - begin
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"PyTorch {args.preset:5s} threads {args.threads} batch {batch:3d} seq {args.seq} separate-qkv: "
          f"{batch * args.steps / seconds:7.2f} samples/s  {1000 * seconds / args.steps:8.1f} ms/step  peak RSS {peak:6.0f} MiB")


if __name__ == "__main__":
    main()
