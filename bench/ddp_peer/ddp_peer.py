"""PyTorch's own data parallelism, the peer of mpibert's strategies: HF's BertForQuestionAnswering
under torch.nn.parallel.DistributedDataParallel (c10d over gloo, bucket_cap_mb 25,
gradient_as_bucket_view=True) or FSDP2 (fully_shard on every encoder layer and the root; fsdp2-kept
with reshard_after_forward=False, the gathered parameters kept from forward to backward), torch's
fused AdamW and clip_grad_norm_ (max norm 1.0), one thread per rank, fixed-shape batches as
mpibert's --padding full gives them (every sequence max_seq_length long, random token ids: the
dense exchange does not depend on them).

Launched by mpirun (the rank and world size from Open MPI's environment; mpirun starts the
processes, gloo carries the data over TCP to --master, the first rank's host):

    mpirun -n N python ddp_peer.py --strategy ddp|fsdp2|fsdp2-kept --config CONFIG.json --master HOST \
        --batch-size 8 --steps 12 --out RESULT.json

Writes the global samples/s over steps --first-timed..--steps (rank 0, after a barrier at both
ends) and each step's end time as JSON.
"""

import argparse
import json
import os
import time

import torch
import torch.distributed as dist


def parse():
    parser = argparse.ArgumentParser()
    parser.add_argument("--strategy", choices=["ddp", "fsdp2", "fsdp2-kept"], required=True)
    parser.add_argument("--config", required=True)
    parser.add_argument("--master", required=True, help="the first rank's host (gloo's rendezvous)")
    parser.add_argument("--port", type=int, default=29511)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seq", type=int, default=384)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--first-timed", type=int, default=3)
    parser.add_argument("--bucket-mb", type=float, default=25)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", required=True)
    return parser.parse_args()


def model_for(strategy, config_path, bucket_mb):
    from transformers import BertConfig, BertForQuestionAnswering

    torch.manual_seed(42)
    model = BertForQuestionAnswering(BertConfig(**json.load(open(config_path))))
    model.train()
    if strategy == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(model, bucket_cap_mb=bucket_mb, gradient_as_bucket_view=True)
    from torch.distributed.fsdp import fully_shard

    reshard_after_forward = strategy != "fsdp2-kept"
    for layer in model.bert.encoder.layer:
        fully_shard(layer, reshard_after_forward=reshard_after_forward)
    fully_shard(model, reshard_after_forward=reshard_after_forward)
    return model


def main():
    args = parse()
    torch.set_num_threads(args.threads)
    rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
    world = int(os.environ["OMPI_COMM_WORLD_SIZE"])
    dist.init_process_group("gloo", init_method=f"tcp://{args.master}:{args.port}", rank=rank, world_size=world)
    model = model_for(args.strategy, args.config, args.bucket_mb)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01, fused=True)
    generator = torch.Generator().manual_seed(1000 + rank)
    vocab = json.load(open(args.config))["vocab_size"]
    for step in range(1, args.steps + 1):
        if step == args.first_timed:
            dist.barrier()
            start = time.perf_counter()
        ids = torch.randint(1, vocab, (args.batch_size, args.seq), generator=generator)
        positions = torch.randint(0, args.seq, (2, args.batch_size), generator=generator)
        loss = model(input_ids=ids, token_type_ids=torch.zeros_like(ids), attention_mask=torch.ones_like(ids),
                     start_positions=positions[0], end_positions=positions[1]).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=False)
    dist.barrier()
    seconds = time.perf_counter() - start
    timed = args.steps - args.first_timed + 1
    if rank == 0:
        json.dump({"strategy": args.strategy, "world_size": world, "batch_size": args.batch_size, "seq": args.seq,
                   "timed_steps": timed, "seconds": seconds,
                   "samples_per_second": timed * args.batch_size * world / seconds,
                   "torch": torch.__version__}, open(args.out, "w"), indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
