"""What a new sequence length costs SDPA on a GPU: bert-base's attention (batch 32, 12 heads of
64, bf16, HF's additive padding mask) at every length dynamic padding produces (multiples of 8 up
to 384), forward and backward, timed on its first call and again once warm, with each backend
set that torch allows (all; without cuDNN's; without cuDNN's and flash). Also names the kernels
one call runs. Python's torch dispatches SDPA as LibTorch does (the same ATen).

    python3 bench/sdpa_shapes.py [--lengths 64:384:8]
"""
import argparse
import random
import statistics
import time

import torch


def step(q, k, v, mask):
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    out.sum().backward()
    torch.cuda.synchronize()


def inputs(length, batch=32, heads=12, head_size=64):
    shape = (batch, heads, length, head_size)
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    keep = torch.rand(batch, length, device="cuda") > 0.1
    mask = ((~keep).to(torch.bfloat16) * torch.finfo(torch.bfloat16).min)[:, None, None, :]
    return q, k, v, mask


def timed(length):
    args = inputs(length)
    start = time.perf_counter()
    step(*args)
    first = time.perf_counter() - start
    start = time.perf_counter()
    step(*args)
    return first, time.perf_counter() - start


def kernels(length):
    args = inputs(length)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        step(*args)
    return sorted({e.name[:60] for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
                   and ("attention" in e.name.lower() or "fmha" in e.name.lower() or "flash" in e.name.lower()
                        or "cudnn" in e.name.lower() or "sm90" in e.name.lower())})


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lengths", default="64:384:8")
    lo, hi, by = (int(x) for x in parser.parse_args().lengths.split(":"))
    lengths = list(range(lo, hi + 1, by))
    settings = {"all backends": (True, True), "no cuDNN": (False, True), "no cuDNN, no flash": (False, False)}
    print("| backends | first call, mean ms | warm call, mean ms | kernels at length %d |" % lengths[-1])
    print("|---|---|---|---|")
    for name, (cudnn, flash) in settings.items():
        torch.backends.cuda.enable_cudnn_sdp(cudnn)
        torch.backends.cuda.enable_flash_sdp(flash)
        timed(8)  # the backends' kernels loaded, outside the timings
        order = lengths[:]
        random.Random(0).shuffle(order)
        times = [timed(n) for n in order]
        print("| %s | %.1f | %.2f | %s |" % (name, 1e3 * statistics.mean(t[0] for t in times),
                                             1e3 * statistics.mean(t[1] for t in times), "; ".join(kernels(lengths[-1]))))


if __name__ == "__main__":
    main()
