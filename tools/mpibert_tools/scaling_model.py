"""Alpha-beta scaling model of mpibert's data-parallel training step.

Usage (from anywhere; paths default to results/scaling_model/, where its inputs and outputs are kept):

    tools/scaling-model check   [--measured DIR] [--measured-bf16 DIR] [--out DIR] [--no-plot]
    tools/scaling-model project [--clusters FILE] [--out DIR] [--no-plot]
    tools/scaling-model all     [options of both]

`check` reads measured/<run>/{results.json,metrics.jsonl,link.json} and
measured/allreduce-<rate>-<p>r.txt (bench_allreduce output; <rate> is rate_mbit or
"unlimited"), fits alpha and beta of the link, predicts each run's exposed gradient
communication and step time, and writes check.md and check.png. Where measured-bf16/ exists
(bench/reduced_precision.sh hosts: fp32 and bf16 wire dtypes side by side, link.json's
reduce_dtype/param_dtype), check.md gets a section on it; its links are fitted from measured/'s files.
`check` does not take hsdp runs (its shard group's collectives run inside a test host, which no
link fit measures). `project` also writes projection-hsdp.md: ddp, fsdp and hsdp on clusters.json's
`hsdp_projection` clusters (8 and 64 H100 nodes, IB 100/200) at its per-GPU compute rates (1,511
samples/s measured on an H200, 3,000 the target).
`project` writes projection.md, projection.png and projection-memory.png for bert-base/bert-large
on A100/H100 nodes (8 GPUs each) with 100/200/400 Gbit/s InfiniBand, from clusters.json: step
time per strategy and the largest batch per GPU that fits in memory.

The step (as mpibert's src/parallel/ (flat_groups.cpp, gradient_reducer.cpp, ddp.cpp, fsdp.cpp) and src/train/trainer.cpp do it):
  ddp, zero1, zero2:
    step = data + forward + backward + exposed gradient communication + optimizer
           (+ zero1/zero2: the norm all-reduce and the parameter all-gather after the optimizer,
           never overlapped) + the per-step host all-reduce of the sample count (16 bytes).
    zero1 and zero2 issue the same collectives (reduce-scatter per bucket); they differ in memory.
  fsdp (FULL_SHARD): the flat groups are the model's units (embeddings, each encoder layer, the QA
    head). Forward: unit u's all-gather and unit u+1's are issued before u runs, u waits for its own.
    Backward, from the last unit (kept whole since forward) to the first: wait for the unit's
    gather, issue the gather of the unit before it, compute, issue the unit's reduce-scatter.
    One FIFO of 3U-1 collectives per micro-batch (U gathers in forward, U-1 in backward, U
    reduce-scatters), on every micro-batch. Waits for gathers fall in the forward and backward
    phases; the reduce-scatters left at the end of backward in gradient_sync; the norm all-reduce
    in the optimizer phase; no all-gather after the step.
  hsdp (HYBRID_SHARD; src/parallel/hsdp.cpp, shards.cpp): fsdp over a shard group of G consecutive
    ranks (--shard-group-size; by default, and in the projections, the GPUs of a node), the units
    padded to a multiple of G, the gathers and reduce-scatters over G ranks (on a Cluster, p = G <=
    gpus_per_node: NVLink only), replicated across the R = world / G groups. After unit u's
    reduce-scatter each rank all-reduces its slice of u (1/G of the unit) with the R ranks holding
    the same slice (ranks r, r+G, ...), one all-reduce per unit per micro-batch
    (ShardedGradients::all_reduce_across_replicas): issued at the first moment the plan is issued
    from (a unit's backward starting, a unit's gradients complete) at which u's reduce-scatter is
    done, in reduce-scatter order, the rest at the end of backward once their reduce-scatters are;
    they run on the replicas' communicator, a second stream (FIFO) beside the shard group's.
    gradient_sync waits for both streams; with accumulation the next micro-batch's backward waits
    for the replicas (Fsdp::begin_backward closes the micro-batch before). The norm all-reduce runs
    over the shard group (the replicas hold the same slices); the optimizer steps on 1/G of the
    state.
    NIC sharing (one NIC per node, as every Cluster here): the G ranks of a node all-reduce their
    slices of the same unit at the same moment, so min(G, gpus_per_node) replica rings cross the NIC
    at once and share it equally: each runs on a Cluster view with max(1, gpus_per_node / G) GPUs
    per node and net_Bps / min(G, gpus_per_node) (replica_network), i.e. a unit's all-reduce takes
    as long as one all-reduce of the whole unit over one GPU per node. NVLink traffic (the shard
    group's) and NIC traffic (the replicas') do not slow each other.

Approximations (stated, not hidden):
  * Buckets follow mpibert's rule exactly: reverse registration order, bucket 0 holds at most
    first_bucket_mb (1 MiB), later ones bucket_mb; a bucket closes when the next parameter
    would exceed its capacity (it always takes one); fp32 bytes; the element count is rounded
    up to a multiple of the world size. fsdp's units are padded the same way.
  * Wire dtype (--reduce-dtype, --param-dtype; fp32 unless a run or projection says bf16): every
    gradient reduction (ddp's bucket all-reduces and sparse rows, zero1/zero2/fsdp's
    reduce-scatters) moves 4 or 2 bytes per element; fsdp's gathers in forward and backward move
    the param dtype's. Unchanged: bucket capacity (fp32 bytes), ddp's mask of rows (fp32), the
    norm all-reduce (float64), the sample count, zero1/zero2's parameter all-gather (fp32). The
    bf16 sum's per-element additions are not charged (no gamma term).
  * ddp with the sparse embedding exchange (mpibert's default): the word embedding is a group of
    its own, the last; a mask all-reduce (vocab x 4 bytes) goes first as backward starts, and the
    embedding's all-reduce carries rows x H x 4 bytes (the rows a step touched: from results.json
    in `check`, from embedding_rows.json in `project`), or the whole table past 90% of the vocab.
  * A parameter's gradient is ready at backward_time x (cumulative backward cost, in reverse
    registration order, up to and including it) / (total cost). Costs per token:
    Linear weight 2*numel (grad-input and grad-weight matmuls, each numel MACs);
    the attention core of a layer (QK^T and AV backward) 4*seq*H, charged to that layer's
    value.weight, the first Q/K/V gradient that needs it; an embedding table H (a scatter-add
    of one row per token; numel does not matter); biases and LayerNorm numel (elementwise,
    negligible). Kernel launch overheads and elementwise ops (GELU, softmax, dropout) are
    not charged separately: they scale the whole backward, not the shares.
    fsdp: a unit's forward and backward take its share of these costs (forward FLOPs are about
    half of backward's for every unit, so the shares are the same).
  * A bucket's reduction starts at max(its ready time, end of the previous bucket's):
    one communication thread/stream, collectives run in issue order (a FIFO).
  * Exposed communication = end of the last reduction - end of backward (>= 0); fsdp adds the
    waits for gathers inside forward and backward.
  * Collectives (Thakur, Rabenseifner & Gropp 2005; ring: Patarasuk & Yuan 2009):
      ring all-reduce      2(p-1) alpha + 2(p-1)/p n beta
      ring reduce-scatter   (p-1) alpha +  (p-1)/p n beta   (all-gather the same)
      tree all-reduce      2 (steps up the tree) alpha + 2 n beta   (NCCL double binary tree)
    On GPU clusters the all-reduce takes the faster of ring and tree (NCCL's tuner does so
    roughly; reduce-scatter and all-gather have only the ring there).
  * Hierarchical clusters: p = nodes x 8. Inside a node NVLink (bus bandwidth B_nvl); a ring
    spanning nodes crosses each node's NIC once per direction, so each node's NIC carries
    2(p-1)/p n bytes of an all-reduce: beta_eff = 1 / min(B_nvl, B_node_network). Latency as
    NCCL's tuning.cc: base + (intra steps) alpha_intra + (inter-node steps) alpha_inter.
  * Communication does not slow compute (on a GPU NCCL kernels do take SMs and memory
    bandwidth; on the 2-core VM the MPI progress thread competes with compute: that shows up
    as error in the check, it is not modelled).
  * Bytes across nodes (StepResult.node_bytes, on a Cluster): what leaves each node's NIC per step.
    A ring over ranks that span nodes crosses each NIC once per direction: what one rank sends.
    hsdp: the shard group's collectives where the group spans nodes, plus min(G, gpus_per_node) x
    one rank's replica all-reduce bytes (2(R-1)/R x its slice), where the replica ring spans nodes.
  * Memory (the largest batch that fits): model state by strategy as DataParallel holds it,
    activations autograd saves per token (counted from src/model/bert_qa.cpp's forward, with
    scaled_dot_product_attention's memory-efficient kernel: no seq x seq tensor kept), the weight
    copies the forward saves, fsdp's units in flight, and a workspace allowance (clusters.json).
    hsdp holds fsdp's state over its shard group (16/G bytes per parameter, not 16/world), and
    fsdp's units in flight.
    See results/scaling_model/README.md for the formulas.
"""

import argparse
import dataclasses
import json
import math
import os
import sys
from dataclasses import dataclass, field

# What the projection reads travels with the package (inputs/: links into the checkout, copied into
# an installed package), so that `pip install ./tools` then `mpibert-scaling-model project` works
# from anywhere. The measured runs and the outputs are the checkout's results/scaling_model when the
# package runs from a checkout, else options (the current directory for the outputs).
INPUTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "inputs")
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHECKOUT_DATA_DIR = os.path.join(REPO_ROOT, "results", "scaling_model")
DATA_DIR = CHECKOUT_DATA_DIR if os.path.isdir(CHECKOUT_DATA_DIR) else None  # the measurements, the outputs
MIB = 1024 * 1024
FIRST_BUCKET_MB = 1.0
SPARSE_ROWS_MAX_FRACTION = 0.9  # DataParallelOptions::sparse_rows_max_fraction
PROJECTION_GPUS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
BUCKET_CHOICES_MB = [1, 5, 10, 25, 50, 100]
STRATEGIES = ["ddp", "zero1", "zero2", "fsdp", "hsdp"]
REDUCE_SCATTER_STRATEGIES = ("zero1", "zero2")  # buckets reduce-scattered, parameters all-gathered after the step
SHARDED_STRATEGIES = ("zero1", "zero2", "fsdp", "hsdp")  # the optimizer on a slice of the state (shard_ranks)
UNIT_STRATEGIES = ("fsdp", "hsdp")  # the flat groups are the model's units, gathered in forward and backward
CHECKED_STRATEGIES = ("ddp", "zero1", "zero2", "fsdp")  # what `check` predicts from the test hosts' link fits
PRECISIONS = ["bf16", "fp32"]
# Bytes per element on the wire: --reduce-dtype (gradient reductions) and --param-dtype (fsdp's gathers).
WIRE_BYTES = {"fp32": 4, "bf16": 2}
GIB = 1024 ** 3
CONFIG_KEYS = ["hidden_size", "intermediate_size", "num_hidden_layers", "vocab_size",
               "max_position_embeddings", "type_vocab_size"]


class InputError(Exception):
    """Bad input: the message names the file and the problem."""


def shard_ranks(strategy, p, group=None):
    """The ranks a strategy shards its state over: none for ddp (1), every rank for zero1, zero2
    and fsdp, the shard group for hsdp: `group` consecutive ranks (mpibert's --shard-group-size,
    by default the ranks of a node), fewer when the job has fewer ranks than a group."""
    if strategy == "hsdp":
        if not group:
            raise ValueError("hsdp needs its shard group size")
        size = min(p, group)
        if p % size:
            raise ValueError(f"hsdp: shard groups of {size} do not divide {p} ranks")
        return size
    return p if strategy in SHARDED_STRATEGIES else 1


# ----------------------------------------------------------------------------------------
# Reading files

def read_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise InputError(f"{path}: file not found") from None
    except json.JSONDecodeError as error:
        raise InputError(f"{path}: not valid JSON ({error})") from None


def require(mapping, key, path, kind=(int, float)):
    """A key that must be there with a value of `kind`; the error names file and key."""
    if not isinstance(mapping, dict) or key not in mapping:
        raise InputError(f"{path}: missing key '{key}'")
    value = mapping[key]
    if kind is not None and (not isinstance(value, kind) or isinstance(value, bool)):
        raise InputError(f"{path}: '{key}' = {value!r} is not {getattr(kind, '__name__', kind)}")
    return value


def check_config(config, path):
    for key in CONFIG_KEYS:
        value = require(config, key, path, int)
        if value <= 0:
            raise InputError(f"{path}: '{key}' = {value} must be positive")
    return config


def load_config(path):
    return check_config(read_json(path), path)


# ----------------------------------------------------------------------------------------
# Parameters of BertForQuestionAnswering, in registration order

@dataclass
class Param:
    name: str
    numel: int
    kind: str  # "linear" | "embedding" | "vector"
    layer: int = -1


def parameter_list(config):
    """HF BertForQuestionAnswering's parameters in registration order (no pooler)."""
    h, i = config["hidden_size"], config["intermediate_size"]
    params = [Param("bert.embeddings.word_embeddings.weight", config["vocab_size"] * h, "embedding"),
              Param("bert.embeddings.position_embeddings.weight", config["max_position_embeddings"] * h, "embedding"),
              Param("bert.embeddings.token_type_embeddings.weight", config["type_vocab_size"] * h, "embedding"),
              Param("bert.embeddings.LayerNorm.weight", h, "vector"),
              Param("bert.embeddings.LayerNorm.bias", h, "vector")]
    for layer in range(config["num_hidden_layers"]):
        p = f"bert.encoder.layer.{layer}."
        shapes = [("attention.self.query.weight", h * h, "linear"), ("attention.self.query.bias", h, "vector"),
                  ("attention.self.key.weight", h * h, "linear"), ("attention.self.key.bias", h, "vector"),
                  ("attention.self.value.weight", h * h, "linear"), ("attention.self.value.bias", h, "vector"),
                  ("attention.output.dense.weight", h * h, "linear"), ("attention.output.dense.bias", h, "vector"),
                  ("attention.output.LayerNorm.weight", h, "vector"), ("attention.output.LayerNorm.bias", h, "vector"),
                  ("intermediate.dense.weight", i * h, "linear"), ("intermediate.dense.bias", i, "vector"),
                  ("output.dense.weight", h * i, "linear"), ("output.dense.bias", h, "vector"),
                  ("output.LayerNorm.weight", h, "vector"), ("output.LayerNorm.bias", h, "vector")]
        params += [Param(p + name, numel, kind, layer) for name, numel, kind in shapes]
    params += [Param("qa_outputs.weight", 2 * h, "linear"), Param("qa_outputs.bias", 2, "vector")]
    return params


def total_params(config):
    return sum(p.numel for p in parameter_list(config))


def backward_costs(params, config, seq_len):
    """Backward cost per token of each parameter (registration order); see the docstring."""
    h = config["hidden_size"]
    costs = []
    for p in params:
        if p.kind == "linear":
            cost = 2.0 * p.numel
            if p.name.endswith("attention.self.value.weight"):
                cost += 4.0 * seq_len * h  # the attention core's backward comes before Q/K/V's
        elif p.kind == "embedding":
            cost = float(h)
        else:
            cost = float(p.numel)
        costs.append(cost)
    return costs


# ----------------------------------------------------------------------------------------
# Buckets (mpibert's group_into_buckets, src/parallel/flat_groups.cpp)

@dataclass
class Bucket:
    members: list = field(default_factory=list)  # parameter indices, reverse registration order
    numel: int = 0                                # rounded up to a multiple of the world size

    @property
    def nbytes(self):
        return 4 * self.numel  # fp32: what bucket capacity counts, and zero1/zero2's parameter all-gather

    def wire_bytes(self, dtype):
        return WIRE_BYTES[dtype] * self.numel


def build_buckets(numels, bucket_mb, world, first_bucket_mb=FIRST_BUCKET_MB, sparse_embedding=False):
    """`sparse_embedding`: parameter 0, the word embedding, is a group of its own, the last."""
    buckets, filled = [], 0
    for k in reversed(range(len(numels))):
        if sparse_embedding and k == 0:
            continue
        capacity = (first_bucket_mb if len(buckets) <= 1 else bucket_mb) * MIB
        nbytes = 4 * numels[k]
        if not buckets or (buckets[-1].members and filled + nbytes > capacity):
            buckets.append(Bucket())
            filled = 0
        buckets[-1].members.append(k)
        buckets[-1].numel += numels[k]
        filled += nbytes
    if sparse_embedding:
        buckets.append(Bucket([0], numels[0]))
    for bucket in buckets:
        bucket.numel = -(-bucket.numel // world) * world
    return buckets


def ready_times(costs, backward_seconds):
    """Seconds after backward starts at which each parameter's gradient is ready."""
    total = sum(costs)
    ready, done = [0.0] * len(costs), 0.0
    for k in reversed(range(len(costs))):
        done += costs[k]
        ready[k] = backward_seconds * done / total
    return ready


def bucket_ready_times(buckets, ready):
    return [max(ready[k] for k in b.members) for b in buckets]


# ----------------------------------------------------------------------------------------
# fsdp's units (group_into_units, BertForQuestionAnsweringImpl::unit_prefixes)

def unit_index(param, num_layers):
    """0: the embeddings; 1 + l: encoder layer l; num_layers + 1: the QA head."""
    if param.name.startswith("bert.embeddings."):
        return 0
    if param.layer >= 0:
        return 1 + param.layer
    return num_layers + 1


def build_units(params, world, num_layers):
    """One flat group per unit in forward order, members in registration order, padded."""
    units = [Bucket() for _ in range(num_layers + 2)]
    for k, param in enumerate(params):
        unit = units[unit_index(param, num_layers)]
        unit.members.append(k)
        unit.numel += param.numel
    for unit in units:
        unit.numel = -(-unit.numel // world) * world
    return units


def group_shares(groups, costs):
    """Each group's share of the total cost (fsdp: of a unit's forward and of its backward)."""
    total = sum(costs)
    return [sum(costs[k] for k in g.members) / total for g in groups]


# ----------------------------------------------------------------------------------------
# Collective costs

def ring_allreduce(n, p, alpha, beta, gamma=0.0):
    """Ring all-reduce of n bytes over p ranks (gamma: optional reduction cost per byte)."""
    if p <= 1:
        return 0.0
    return 2 * (p - 1) * alpha + 2 * (p - 1) / p * n * beta + (p - 1) / p * n * gamma


def ring_reduce_scatter(n, p, alpha, beta, gamma=0.0):
    if p <= 1:
        return 0.0
    return (p - 1) * alpha + (p - 1) / p * n * (beta + gamma)


def ring_all_gather(n, p, alpha, beta):
    if p <= 1:
        return 0.0
    return (p - 1) * alpha + (p - 1) / p * n * beta


def tree_allreduce(n, p, alpha, beta):
    """Pipelined double binary tree, approximately: up and down log2(p) levels, 2n bytes."""
    if p <= 1:
        return 0.0
    return 2 * math.ceil(math.log2(p)) * alpha + 2 * n * beta


# Coefficients (latency steps, bytes factor) of the ring formulas: time = steps*alpha + factor*n*beta.
def ring_terms(op, p):
    if op == "all_reduce":
        return 2 * (p - 1), 2 * (p - 1) / p
    if op in ("reduce_scatter", "all_gather"):
        return p - 1, (p - 1) / p
    raise ValueError(f"unknown collective {op}")


@dataclass
class Link:
    """A fitted (or nominal) flat link: seconds per ring step and per byte."""
    alpha: float
    beta: float

    def cost(self, op, n, p):
        steps, factor = ring_terms(op, p)
        return (steps * self.alpha + factor * n * self.beta) if p > 1 else 0.0, "ring"


@dataclass
class Cluster:
    """Nodes of 8 GPUs: NVLink inside, one network per node across (see the docstring)."""
    gpus_per_node: int
    nvlink_Bps: float
    net_Bps: float
    alpha_intra: float
    alpha_inter: float
    base_latency: float

    def layout(self, p):
        nodes = -(-p // self.gpus_per_node)
        return nodes, min(p, self.gpus_per_node)

    def bandwidth(self, p):
        nodes, _ = self.layout(p)
        return self.nvlink_Bps if nodes == 1 else min(self.nvlink_Bps, self.net_Bps)

    def ring(self, op, n, p):
        nodes, _ = self.layout(p)
        steps, factor = ring_terms(op, p)
        inter = (2 if op == "all_reduce" else 1) * (nodes - 1)
        latency = self.base_latency + (steps - inter) * self.alpha_intra + inter * self.alpha_inter
        return latency + factor * n / self.bandwidth(p)

    def tree(self, n, p):
        nodes, per_node = self.layout(p)
        levels = (per_node - 1) * self.alpha_intra + math.ceil(math.log2(nodes)) * self.alpha_inter
        return self.base_latency + 2 * levels + 2 * n / self.bandwidth(p)

    def cost(self, op, n, p):
        if p <= 1:
            return 0.0, "-"
        ring = self.ring(op, n, p)
        if op != "all_reduce":
            return ring, "ring"
        tree = self.tree(n, p)
        return (tree, "tree") if tree < ring else (ring, "ring")


# ----------------------------------------------------------------------------------------
# The step

@dataclass
class StepInput:
    data: float
    forward: float
    backward: float
    optimizer: float        # what the optimizer phase costs besides its collectives
    strategy: str
    world: int
    num_params: int         # parameter tensors (the norm all-reduce has one float64 each)
    embedding_rows: float = None  # ddp's sparse embedding exchange: the union's rows a step (None: dense)
    reduce_dtype: str = "fp32"    # --reduce-dtype: every gradient reduction (ddp's mask of rows stays fp32)
    param_dtype: str = "fp32"     # --param-dtype: fsdp's parameter gathers in forward and backward
    shard_group: int = 0          # hsdp: the ranks a slice is sharded over (shard_ranks); the rest ignore it
    keep_gathered: bool = False   # fsdp, hsdp --keep-gathered-for-backward: backward gathers nothing


@dataclass
class StepResult:
    step: float
    exposed: float           # communication the step waits for outside the optimizer phase (fsdp: gathers too)
    gather: float            # after the optimizer: zero1/zero2 norm all-reduce + all-gather; fsdp norm all-reduce
    buckets: int             # flat groups: buckets, or fsdp's units
    algorithms: list
    tail: float = 0.0        # the part of `exposed` after backward (gradient_sync)
    forward: float = 0.0     # the forward and backward phases as mpibert times them (fsdp: with gather waits)
    backward: float = 0.0
    network_bytes: float = 0.0  # sent per rank per step, by the ring formulas' (p-1)/p factors
    collectives: int = 0     # per step, the sample-count all-reduce left out
    reduced_bytes: float = 0.0  # handed to gradient reductions per step, as results.json's gradient_bytes_reduced_per_rank
    node_bytes: float = 0.0  # sent out of each node's NIC per step (a Cluster's nodes; 0 on one node or another network)
    replica_seconds: float = 0.0  # hsdp: the all-reduces across the replicas per step, one after another


def ring_bytes(op, n, p):
    """Bytes each rank sends in a bandwidth-optimal (ring) collective of n bytes."""
    return ring_terms(op, p)[1] * n if p > 1 else 0.0


def fifo_finish_times(ready, durations):
    """One communication thread: bucket b starts at max(ready_b, finish_{b-1})."""
    finishes, free = [], 0.0
    for r, d in zip(ready, durations):
        free = max(r, free) + d
        finishes.append(free)
    return finishes


def exposed_communication(ready, durations, backward_end):
    if not durations:
        return 0.0
    return max(0.0, fifo_finish_times(ready, durations)[-1] - backward_end)


def after_step_collectives(inp, groups, network):
    """zero1/zero2: the norm all-reduce (float64 per parameter), then every bucket's parameter
    all-gather; fsdp: the norm all-reduce only; hsdp: the norm all-reduce over the shard group (the
    replicas hold the same reduced slices). Returns (seconds, bytes sent, count)."""
    p = shard_ranks(inp.strategy, inp.world, inp.shard_group)
    if inp.strategy not in SHARDED_STRATEGIES or p <= 1:
        return 0.0, 0.0, 0
    seconds = network.cost("all_reduce", 8 * inp.num_params, p)[0]
    sent, count = ring_bytes("all_reduce", 8 * inp.num_params, p), 1
    if inp.strategy in REDUCE_SCATTER_STRATEGIES:
        seconds += sum(network.cost("all_gather", g.nbytes, p)[0] for g in groups)
        sent += sum(ring_bytes("all_gather", g.nbytes, p) for g in groups)
        count += len(groups)
    return seconds, sent, count


def sparse_exchange_bytes(config, rows, reduce_dtype="fp32"):
    """(mask bytes, rows' bytes) of ddp's sparse embedding exchange; the rows' bytes are None where
    the union passes SPARSE_ROWS_MAX_FRACTION of the vocabulary and the embedding goes dense (as
    mpibert decides, after the mask's all-reduce). The mask is a count, fp32 whatever the reduce
    dtype; the rows travel in it."""
    vocab = config["vocab_size"]
    if rows > SPARSE_ROWS_MAX_FRACTION * vocab:
        return 4 * vocab, None
    return 4 * vocab, WIRE_BYTES[reduce_dtype] * rows * config["hidden_size"]


def simulate_step(inp, buckets, ready, network, sparse=None):
    """ddp, zero1, zero2. `network.cost(op, bytes, p)` -> (seconds, algorithm). `sparse`: (mask
    bytes, rows' bytes or None): the mask's all-reduce is issued as backward starts, and the last
    bucket, the word embedding, sends the rows' bytes instead of its own (unless None)."""
    p = inp.world
    grad_op = "reduce_scatter" if inp.strategy in REDUCE_SCATTER_STRATEGIES else "all_reduce"
    sizes = [b.wire_bytes(inp.reduce_dtype) for b in buckets]
    if sparse:
        sizes = [sparse[0]] + sizes[:-1] + [sparse[1] if sparse[1] is not None else sizes[-1]]
        ready = [0.0] + list(ready)
    costs = [network.cost(grad_op, n, p) for n in sizes]
    exposed = exposed_communication(ready, [c[0] for c in costs], inp.backward)
    gather, sent, count = after_step_collectives(inp, buckets, network)
    sent += sum(ring_bytes(grad_op, n, p) for n in sizes)
    bookkeeping = network.cost("all_reduce", 16, p)[0]  # finish_step's sample count
    step = inp.data + inp.forward + inp.backward + exposed + inp.optimizer + gather + bookkeeping
    return StepResult(step, exposed, gather, len(buckets), [c[1] for c in costs], tail=exposed,
                      forward=inp.forward, backward=inp.backward, network_bytes=sent,
                      collectives=count + (len(sizes) if p > 1 else 0), reduced_bytes=sum(sizes) if p > 1 else 0.0,
                      node_bytes=sent if spans_nodes(network, p) else 0.0)


def spans_nodes(network, p):
    """Whether p consecutive ranks span more than one node of a Cluster (False on other networks)."""
    return isinstance(network, Cluster) and network.layout(p)[0] > 1


class SharedLink:
    """k ranks' concurrent all-reduces on one flat link: each as one all-reduce of k times its bytes."""

    def __init__(self, network, k):
        self.network, self.k = network, k

    def cost(self, op, n, p):
        return self.network.cost(op, self.k * n, p)


def replica_network(network, group):
    """What hsdp's all-reduces across the replicas (ranks r, r+G, r+2G, ...) run on. On a Cluster
    with one NIC per node: a replica ring holds max(1, gpus_per_node / G) ranks of each node and
    min(G, gpus_per_node) such rings cross a node's NIC at once (every rank all-reduces the same
    unit's slice at the same moment), sharing it equally: a Cluster of that many GPUs per node whose
    network is the NIC's rate / the rings sharing it. Latency and the ring/tree choice as Cluster's.
    On another network (a fitted flat link): the group's all-reduces share the link (SharedLink)."""
    if isinstance(network, Cluster):
        sharing = min(group, network.gpus_per_node)
        return dataclasses.replace(network, gpus_per_node=max(1, network.gpus_per_node // group),
                                   net_Bps=network.net_Bps / sharing)
    return SharedLink(network, group)


def replica_node_bytes(network, group, replicas, per_rank):
    """hsdp: what the replica all-reduces send out of each node's NIC: per_rank (one ring's bytes per
    rank) x the rings that cross the NIC, where a ring spans nodes."""
    if not isinstance(network, Cluster) or replicas <= 1:
        return 0.0
    per_node_in_ring = max(1, network.gpus_per_node // group)
    if per_node_in_ring >= replicas:
        return 0.0
    return min(group, network.gpus_per_node) * per_rank


class CommStream:
    """One communication thread (MPI) or stream (NCCL): collectives run one at a time, in issue
    order, each from max(issued, end of the one before)."""

    def __init__(self):
        self.free, self.count = 0.0, 0

    def run(self, issued, seconds):
        self.free = max(issued, self.free) + seconds
        self.count += 1
        return self.free


def fsdp_forward(start, stream, gather, compute):
    """Unit u's gather and the next unit's issued before u runs (fsdp.cpp, FsdpUnitHooks::before_unit);
    u waits for its own. Returns the end of forward."""
    done, t = {}, start
    for u in range(len(compute)):
        for v in (u, u + 1):
            if v < len(compute) and v not in done:
                done[v] = stream.run(t, gather[v])
        t = max(t, done[u]) + compute[u]
    return t


def fsdp_backward(start, stream, gather, reduce, compute, trace=None, keep_gathered=False):
    """From the last unit (kept whole since forward) to the first: wait for the unit's gather,
    issue the gather of the unit before it, compute, issue the unit's reduce-scatter: the plan
    G(U-2), R(U-1), G(U-3), R(U-2), ..., G(0), R(1), R(0). Returns the end of backward.
    `keep_gathered`: every unit is still whole from forward, its planned gather sends nothing.
    `trace` (a dict), where given, gets "polls": the moments mpibert issues from the plan (a unit's
    backward starting, its gradients complete), and "reduced": (unit, end of its reduce-scatter) in
    issue order."""
    last = len(compute) - 1
    gathered, t = {last: start}, start
    polls, reduced = [], []
    for u in range(last, -1, -1):
        t = max(t, gathered[u])
        if u > 0:
            gathered[u - 1] = t if keep_gathered else stream.run(t, gather[u - 1])
            polls.append(t)
        t += compute[u]
        reduced.append((u, stream.run(t, reduce[u])))
        polls.append(t)
    if trace is not None:
        trace.update(polls=polls, reduced=reduced)
    return t


def replica_all_reduces(trace, end, stream, seconds):
    """hsdp's all-reduces across the replicas (ShardedGradients::all_reduce_across_replicas), in the
    order of the reduce-scatters: each issued at the first moment the plan is issued from (trace's
    polls) at which its reduce-scatter has ended, not before the one ahead of it; those not issued
    by the end of backward at max(end, its reduce-scatter's end) (closed() waits for each). They run
    on the replicas' communicator, a stream of its own. Returns the end of the last."""
    issued = 0.0
    for u, done in trace["reduced"]:
        issued = max(issued, next((t for t in trace["polls"] if t >= done), max(end, done)))
        stream.run(issued, seconds[u])
    return stream.free


def fsdp_bytes_per_micro_batch(units, p, param_dtype="fp32", reduce_dtype="fp32", keep_gathered=False):
    """Sent per rank: every unit gathered in forward, all but the last again in backward (unless
    kept from forward), every unit reduce-scattered."""
    gathers = sum(ring_bytes("all_gather", u.wire_bytes(param_dtype), p) for u in units)
    again = 0.0 if keep_gathered else gathers - ring_bytes("all_gather", units[-1].wire_bytes(param_dtype), p)
    return gathers + again + sum(ring_bytes("reduce_scatter", u.wire_bytes(reduce_dtype), p) for u in units)


def simulate_fsdp_step(inp, units, shares, network, micro_batches=1):
    """fsdp, and hsdp: forward and backward of each micro-batch on one timeline, the shard group's
    collectives on one comm stream (accumulation too: both communicate on every micro-batch).
    hsdp: the units are gathered and reduce-scattered over its shard group of G ranks (on a Cluster
    with G <= gpus_per_node: NVLink only), then each unit's slice is all-reduced across the R =
    world / G replicas on a second stream (replica_all_reduces, replica_network); the micro-batch's
    backward is closed once both streams are done (gradient_sync for the last micro-batch, the next
    micro-batch's backward for the others: Fsdp::begin_backward closes the one before)."""
    p = inp.world
    g = shard_ranks(inp.strategy, p, inp.shard_group) if inp.strategy == "hsdp" else p
    r = p // g
    if g <= 1:
        gather = reduce = [0.0] * len(units)
    else:
        gather = [network.cost("all_gather", u.wire_bytes(inp.param_dtype), g)[0] for u in units]
        reduce = [network.cost("reduce_scatter", u.wire_bytes(inp.reduce_dtype), g)[0] for u in units]
    slices = [u.wire_bytes(inp.reduce_dtype) / g for u in units]  # a rank's slice of each unit
    across = replica_network(network, g) if r > 1 else None
    replica = [across.cost("all_reduce", n, r)[0] for n in slices] if r > 1 else []
    fwd = [inp.forward / micro_batches * s for s in shares]
    bwd = [inp.backward / micro_batches * s for s in shares]
    stream, replicas, t, forward, backward = CommStream(), CommStream(), 0.0, 0.0, 0.0
    closing = 0.0  # hsdp: when the micro-batch before may be closed (its all-reduces across replicas done)
    for _ in range(micro_batches):
        t += inp.data / micro_batches
        end = fsdp_forward(t, stream, gather, fwd)
        forward += end - t
        start = max(end, closing)  # begin_backward closes the micro-batch before
        trace = {}
        t = fsdp_backward(start, stream, gather, reduce, bwd, trace, inp.keep_gathered)
        backward += t - end
        if r > 1:
            closing = replica_all_reduces(trace, t, replicas, replica)
    tail = max(0.0, stream.free - t, replicas.free - t)
    after, after_sent, count = after_step_collectives(inp, units, network)
    bookkeeping = network.cost("all_reduce", 16, p)[0]
    step = inp.data + forward + backward + tail + inp.optimizer + after + bookkeeping
    exposed = forward + backward + tail - inp.forward - inp.backward
    group_bytes = after_sent + micro_batches * fsdp_bytes_per_micro_batch(units, g, inp.param_dtype, inp.reduce_dtype,
                                                                          inp.keep_gathered)
    replica_bytes = micro_batches * sum(ring_bytes("all_reduce", n, r) for n in slices)
    sent = group_bytes + replica_bytes
    reduced = micro_batches * sum(u.wire_bytes(inp.reduce_dtype) for u in units) if g > 1 else 0.0
    reduced += micro_batches * sum(slices) if r > 1 else 0.0
    node = (group_bytes if spans_nodes(network, g) else 0.0) + replica_node_bytes(network, g, r, replica_bytes)
    algorithms = (["ring"] * len(units) if g > 1 else []) + \
        ([across.cost("all_reduce", n, r)[1] for n in slices] if r > 1 else [])
    return StepResult(step, exposed, after, len(units), algorithms, tail=tail,
                      forward=forward, backward=backward, network_bytes=sent,
                      collectives=count + (stream.count if g > 1 else 0) + replicas.count, reduced_bytes=reduced,
                      node_bytes=node, replica_seconds=micro_batches * sum(replica))


def strategy_groups(config, strategy, bucket_mb, world, sparse_embedding=False, group=None):
    """The parameters and the flat groups mpibert makes for them: buckets, or fsdp's and hsdp's
    units (hsdp's padded to a multiple of its shard group, `group`)."""
    params = parameter_list(config)
    if strategy in UNIT_STRATEGIES:
        return params, build_units(params, shard_ranks(strategy, world, group), config["num_hidden_layers"])
    return params, build_buckets([q.numel for q in params], bucket_mb, world, sparse_embedding=sparse_embedding)


def simulate(config, seq_len, inp, bucket_mb, network, micro_batches=1):
    """One step of `inp.strategy` (StepResult)."""
    sparse_group = inp.strategy == "ddp" and inp.embedding_rows is not None and inp.world > 1
    params, groups = strategy_groups(config, inp.strategy, bucket_mb, inp.world, sparse_group, inp.shard_group)
    costs = backward_costs(params, config, seq_len)
    if inp.strategy in UNIT_STRATEGIES:
        return simulate_fsdp_step(inp, groups, group_shares(groups, costs), network, micro_batches)
    ready = bucket_ready_times(groups, ready_times(costs, inp.backward))
    sparse = sparse_exchange_bytes(config, inp.embedding_rows, inp.reduce_dtype) if sparse_group else None
    return simulate_step(inp, groups, ready, network, sparse)


# ----------------------------------------------------------------------------------------
# bench_allreduce output and the alpha-beta fit

def parse_bench(path):
    """{op: [(bytes, seconds), ...]} from bench_allreduce's stdout (nccl-tests style)."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        raise InputError(f"{path}: file not found") from None
    sections, op = {}, None
    for number, line in enumerate(lines, 1):
        text = line.strip()
        if text.startswith("#"):
            word = text[1:].strip()
            if word in ("all_reduce", "reduce_scatter", "all_gather"):
                op = word
                sections.setdefault(op, [])
            continue
        if not text:
            continue
        fields = text.split()
        if op is None or len(fields) != 7:
            raise InputError(f"{path}:{number}: expected a row 'size count type time algbw busbw #wrong' "
                             f"under a '# all_reduce|reduce_scatter|all_gather' header, got: {text!r}")
        try:
            size, micros, wrong = int(fields[0]), float(fields[3]), int(fields[6])
        except ValueError:
            raise InputError(f"{path}:{number}: non-numeric size/time/#wrong in {text!r}") from None
        if wrong != 0:
            raise InputError(f"{path}:{number}: {wrong} wrong elements: the benchmark failed")
        if size <= 0 or micros <= 0:
            raise InputError(f"{path}:{number}: size and time must be positive in {text!r}")
        sections[op].append((size, micros * 1e-6))
    if not any(sections.values()):
        raise InputError(f"{path}: no measurement rows")
    return sections


FIT_MIN_BYTES = 64 * 1024  # below the smallest gradient bucket worth modelling


def fit_alpha_beta(rows, p, path=""):
    """Least squares of time = steps*alpha + factor*bytes*beta over rows [(op, bytes, seconds)]
    of at least FIT_MIN_BYTES (all rows when fewer than two are that large), in absolute time.
    Why not every size: Open MPI picks its algorithm by message size (for 2 ranks, a pairwise
    exchange for small messages and, for large ones, moves that amount to about twice the ring's
    bytes), so one line through 1 KiB..16 MiB fits neither end; gradient buckets are large.
    alpha is held >= 0 (refit with alpha = 0 if the free fit goes negative)."""
    if p < 2:
        raise InputError(f"{path}: an alpha-beta fit needs at least 2 ranks")
    large = [row for row in rows if row[1] >= FIT_MIN_BYTES]
    rows = large if len(large) >= 2 else rows
    saa = sab = sbb = sat = sbt = 0.0
    for op, n, t in rows:
        steps, factor = ring_terms(op, p)
        a, b = float(steps), factor * n
        saa, sab, sbb, sat, sbt = saa + a * a, sab + a * b, sbb + b * b, sat + a * t, sbt + b * t
    det = saa * sbb - sab * sab
    alpha = beta = float("nan")
    if len(rows) >= 2 and det > 1e-12 * saa * sbb:
        alpha = (sat * sbb - sbt * sab) / det
        beta = (saa * sbt - sab * sat) / det
    if not (alpha >= 0 and beta > 0):
        alpha, beta = 0.0, sbt / sbb if sbb > 0 else float("nan")
    if not beta > 0:
        raise InputError(f"{path}: the fit gave no positive beta (rows: {len(rows)})")
    return Link(alpha, beta)


def fit_link_file(path, p):
    """Per-operation fits plus a joint one: {op or 'joint': Link}."""
    sections = parse_bench(path)
    fits = {}
    for op, rows in sorted(sections.items()):
        if rows:
            fits[op] = fit_alpha_beta([(op, n, t) for n, t in rows], p, f"{path} ({op})")
    everything = [(op, n, t) for op, rows in sorted(sections.items()) for n, t in rows]
    fits["joint"] = fit_alpha_beta(everything, p, f"{path} (all sections)")
    return fits


def nominal_beta(rate_mbit):
    return None if rate_mbit is None else 8.0 / (rate_mbit * 1e6)


@dataclass
class FittedNetwork:
    """Per-operation fitted links; an operation without its own section uses the joint fit."""
    fits: dict

    def cost(self, op, n, p):
        link = self.fits.get(op, self.fits["joint"])
        return link.cost(op, n, p)

    def source(self, op):
        return op if op in self.fits else "joint"


# ----------------------------------------------------------------------------------------
# check: measured runs against the model

@dataclass
class Run:
    name: str
    hosts: int
    rate_mbit: object
    bucket_mb: float
    strategy: str
    world: int
    steps: int
    buckets_measured: int
    config: dict
    batch: int
    seq_len: int
    data: float
    forward: float
    backward: float
    optimizer: float
    sync: float               # gradient_sync phase per step (measured exposed communication)
    exposed_transfer: float   # transfer after backward per step (mean over ranks)
    step: float
    accumulation: int = 1     # micro-batches per step
    embedding_rows: object = None  # ddp's sparse embedding exchange: mean rows a step (None: dense)
    held_bytes: object = None  # parallel.memory_per_rank: the largest steady_state_bytes over ranks (None: not recorded)
    reduce_dtype: str = "fp32"  # link.json (absent: fp32, as every run before --reduce-dtype)
    param_dtype: str = "fp32"
    keep_gathered: bool = False  # parallel.keep_gathered_for_backward (absent: False, as every run before it)
    reduced_bytes: float = float("nan")  # parallel.gradient_bytes_reduced_per_rank per step (nan: not recorded)


def load_run(directory):
    name = os.path.basename(directory.rstrip("/"))
    results_path = os.path.join(directory, "results.json")
    link_path = os.path.join(directory, "link.json")
    results, link = read_json(results_path), read_json(link_path)
    steps = require(results, "global_step", results_path, int)
    if steps <= 0:
        raise InputError(f"{results_path}: global_step = {steps}: no steps to average")
    phases = require(results, "phase_seconds", results_path, dict)
    parallel = require(results, "parallel", results_path, dict)
    parameters = require(results, "parameters", results_path, dict)
    per_step = {k: require(phases, k, results_path) / steps for k in ("data", "forward", "backward", "gradient_sync", "optimizer")}
    world = require(parallel, "world_size", results_path, int)
    strategy = require(parallel, "strategy", results_path, str)
    for key in ("rate_mbit", "delay_ms", "hosts", "bucket_mb", "strategy"):
        if key not in link:
            raise InputError(f"{link_path}: missing key '{key}'")
    rate = link["rate_mbit"]
    if rate is not None and (not isinstance(rate, (int, float)) or rate <= 0):
        raise InputError(f"{link_path}: rate_mbit = {rate!r} must be a positive number or null")
    if link["strategy"] != strategy:
        raise InputError(f"{link_path}: strategy '{link['strategy']}' but {results_path} says '{strategy}'")
    bucket_mb = require(parallel, "bucket_mb", results_path)
    if abs(float(link["bucket_mb"]) - bucket_mb) > 1e-9:
        raise InputError(f"{link_path}: bucket_mb {link['bucket_mb']} but {results_path} says {bucket_mb}")
    config = check_config(require(parameters, "model", results_path, dict), results_path + " parameters.model")
    if strategy == "hsdp":
        raise InputError(f"{results_path}: an hsdp run: `check` does not predict hsdp (its shard group's collectives "
                         "run inside a test host, over loopback, which no link benchmark here measures); `project` "
                         "models it")
    if strategy not in STRATEGIES:
        raise InputError(f"{results_path}: parallel.strategy '{strategy}' is none of {', '.join(STRATEGIES)}")
    dtypes = {key: wire_dtype(link, parallel, key, link_path, results_path) for key in ("reduce_dtype", "param_dtype")}
    reduced = parallel.get("gradient_bytes_reduced_per_rank")
    return Run(name=name, hosts=require(link, "hosts", link_path, int), rate_mbit=rate, bucket_mb=bucket_mb,
               strategy=strategy, world=world, steps=steps,
               buckets_measured=require(parallel, "gradient_buckets", results_path, int), config=config,
               batch=require(parameters, "batch_size", results_path, int),
               seq_len=int(link.get("seq_len", 384)),
               data=per_step["data"], forward=per_step["forward"], backward=per_step["backward"],
               optimizer=per_step["optimizer"], sync=per_step["gradient_sync"],
               exposed_transfer=parallel.get("gradient_transfer_after_backward_seconds_mean", float("nan")) / steps,
               step=require(results, "train_step_seconds", results_path) / steps,
               accumulation=micro_batches(parameters, results_path), held_bytes=held_memory(parallel, results_path),
               embedding_rows=sparse_rows(parallel, results_path), **dtypes,
               keep_gathered=bool(parallel.get("keep_gathered_for_backward", False)),
               reduced_bytes=reduced / steps if isinstance(reduced, (int, float)) else float("nan"))


def wire_dtype(link, parallel, key, link_path, results_path):
    """link.json's `key` (absent: fp32); results.json's parallel.`key`, where mpibert recorded it,
    must say the same."""
    dtype = link.get(key, "fp32")
    if dtype not in WIRE_BYTES:
        raise InputError(f"{link_path}: {key} = {dtype!r} is none of {', '.join(WIRE_BYTES)}")
    if key in parallel and parallel[key] != dtype:
        raise InputError(f"{link_path}: {key} '{dtype}' but {results_path} says '{parallel[key]}'")
    return dtype


def sparse_rows(parallel, path):
    """The mean rows a step's sparse embedding exchange sent, over the steps that went sparse. None:
    no exchange (dense asked for, or recorded before it existed); inf: every step's union was too
    large (the mask, then the whole table). A run whose steps went both ways is taken as sparse."""
    if parallel.get("embedding_exchange", "dense") != "sparse":
        return None
    if require(parallel, "embedding_sparse_exchanges", path, int) == 0:
        return float("inf")  # every step fell back: the mask, then the dense embedding
    return require(parallel, "embedding_rows_exchanged_mean", path)


def micro_batches(parameters, path):
    """parameters.gradient_accumulation (1 when absent)."""
    accumulation = parameters.get("gradient_accumulation", 1)
    if not isinstance(accumulation, int) or isinstance(accumulation, bool) or accumulation < 1:
        raise InputError(f"{path}: parameters.gradient_accumulation = {accumulation!r} is not a positive integer")
    return accumulation


def held_memory(parallel, path):
    """The largest `steady_state_bytes` over ranks in parallel.memory_per_rank, or None."""
    ranks = parallel.get("memory_per_rank")
    if ranks is None:
        return None
    if not isinstance(ranks, list) or not ranks:
        raise InputError(f"{path}: parallel.memory_per_rank is not a non-empty list")
    return max(require(rank, "steady_state_bytes", f"{path} (parallel.memory_per_rank)", int) for rank in ranks)


def rate_token(rate_mbit):
    if rate_mbit is None:
        return "unlimited"
    return str(int(rate_mbit)) if float(rate_mbit).is_integer() else str(rate_mbit)


def load_measured(measured, links=None):
    """The runs of `measured` and the fitted links of their (rate, ranks), from its
    allreduce-<rate>-<p>r.txt or, where it has none, from `links`' (the same links measured in
    another session: bench/reduced_precision.sh writes no link benchmark)."""
    if not os.path.isdir(measured):
        raise InputError(f"{measured}: no such directory (run tools/measure_scaling.sh first)")
    runs = [load_run(os.path.join(measured, d)) for d in sorted(os.listdir(measured))
            if os.path.isdir(os.path.join(measured, d))]
    if not runs:
        raise InputError(f"{measured}: no run directories (each needs results.json and link.json)")
    fits = {}
    for run in runs:
        key = (rate_token(run.rate_mbit), run.world)
        if key not in fits:
            path = os.path.join(measured, f"allreduce-{key[0]}-{key[1]}r.txt")
            if links is not None and not os.path.exists(path):
                path = os.path.join(links, os.path.basename(path))
            fits[key] = fit_link_file(path, run.world)
    return runs, fits


def matching_ddp_runs(run, runs):
    """The ddp runs of the same link, ranks, model, batch, sequence length and accumulation, any
    bucket size (compute does not depend on it)."""
    return [other for other in runs
            if other.strategy == "ddp" and other.world == run.world and other.hosts == run.hosts
            and other.rate_mbit == run.rate_mbit and other.config == run.config and other.batch == run.batch
            and other.seq_len == run.seq_len and other.accumulation == run.accumulation]


def mean_of(runs, phase):
    return sum(getattr(r, phase) for r in runs) / len(runs)


def ddp_source(runs):
    return "ddp " + (f"run {runs[0].name}" if len(runs) == 1 else f"runs {', '.join(r.name for r in runs)} (mean)")


def sharded_optimizer_compute(run, runs):
    """zero1/zero2's optimizer phase includes the norm all-reduce and the all-gather, fsdp's the
    norm all-reduce (clip_and_step). Its compute is estimated as the matching ddp runs' mean
    optimizer phase / p; without one, the measured phase is used as it is (then those collectives
    are measured, not predicted). Returns (seconds or None, how)."""
    ddp = matching_ddp_runs(run, runs)
    if ddp:
        return mean_of(ddp, "optimizer") / run.world, ddp_source(ddp) + " / p"
    return None, "measured (incl. collectives)"


def compute_phases(run, runs):
    """Forward and backward compute per step. fsdp's measured phases hold its waits for gathers,
    so they are the matching ddp runs' mean; ddp/zero1/zero2's are their own.
    Returns (forward, backward, how)."""
    ddp = matching_ddp_runs(run, runs) if run.strategy == "fsdp" else []
    if ddp:
        return mean_of(ddp, "forward"), mean_of(ddp, "backward"), ddp_source(ddp)
    if run.strategy == "fsdp":
        return run.forward, run.backward, "own (incl. gather waits)"
    return run.forward, run.backward, "own"


@dataclass
class CheckRow:
    run: Run
    predicted: StepResult
    buckets_model: int
    optimizer_source: str
    optimizer_predicted: float  # the optimizer phase as mpibert times it (zero1/zero2/fsdp: with its collectives)
    compute_source: str = "own"
    exposed_measured: float = float("nan")  # ddp/zero: gradient_sync; fsdp: forward + backward + sync - compute


def predict_run(run, runs, network):
    forward, backward, compute_how = compute_phases(run, runs)
    optimizer, how = run.optimizer, "measured"
    if run.strategy in SHARDED_STRATEGIES:
        compute, how = sharded_optimizer_compute(run, runs)
        optimizer = compute if compute is not None else run.optimizer
    inp = StepInput(run.data, forward, backward, optimizer, run.strategy, run.world, len(parameter_list(run.config)),
                    run.embedding_rows, run.reduce_dtype, run.param_dtype, keep_gathered=run.keep_gathered)
    result = simulate(run.config, run.seq_len, inp, run.bucket_mb, network, run.accumulation)
    if run.strategy in SHARDED_STRATEGIES and how.startswith("measured"):
        result.step -= result.gather  # the measured optimizer phase already holds them
        result.gather = 0.0
    exposed = run.sync
    if run.strategy == "fsdp":
        exposed = float("nan") if compute_how.startswith("own") else \
            run.forward + run.backward + run.sync - forward - backward
    return CheckRow(run, result, result.buckets, how, optimizer + result.gather, compute_how, exposed)


def percent(predicted, measured):
    return float("nan") if measured == 0 else 100.0 * (predicted - measured) / measured


def fmt(x, digits=3):
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def fit_table(fits, runs):
    lines = ["| link | ranks | op | alpha (us) | beta (ns/B) | fitted bandwidth (MB/s) | nominal beta (ns/B) | fitted / nominal beta |",
             "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |"]
    for (rate, p), ops in sorted(fits.items(), key=lambda kv: (kv[0][0] == "unlimited", kv[0][0].zfill(12), kv[0][1])):
        nominal = nominal_beta(None if rate == "unlimited" else float(rate))
        for op, link in ops.items():
            ratio = fmt(link.beta / nominal, 2) if nominal else "n/a"
            lines.append(f"| {rate} Mbit/s | {p} | {op} | {link.alpha * 1e6:.1f} | {link.beta * 1e9:.3f} | "
                         f"{1e-6 / link.beta:.1f} | {fmt(nominal * 1e9 if nominal else None)} | {ratio} |")
    return lines


def check_table(rows):
    lines = ["| run | hosts | rate (Mbit/s) | bucket MiB | strategy | buckets (meas/model) | compute/step (s) | "
             "forward, backward from | exposed/step meas (s) | exposed pred (s) | exposed err % | "
             "after backward: transfer meas (s) | after backward: pred (s) | "
             "step meas (s) | step pred (s) | step err % | optimizer phase meas / pred (s) | optimizer compute from |",
             "| --- | ---: | ---: | ---: | --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for row in rows:
        r, pr = row.run, row.predicted
        compute = r.data + r.forward + r.backward + r.optimizer
        lines.append(f"| {r.name} | {r.hosts} | {rate_token(r.rate_mbit)} | {r.bucket_mb:g} | {r.strategy} | "
                     f"{r.buckets_measured}/{row.buckets_model} | {compute:.3f} | {row.compute_source} | "
                     f"{fmt(row.exposed_measured)} | {pr.exposed:.3f} | {fmt(percent(pr.exposed, row.exposed_measured), 0)} | "
                     f"{fmt(r.exposed_transfer)} | {pr.tail:.3f} | {r.step:.3f} | {pr.step:.3f} | "
                     f"{fmt(percent(pr.step, r.step), 1)} | {r.optimizer:.3f} / {row.optimizer_predicted:.3f} | "
                     f"{row.optimizer_source} |")
    return lines


def fsdp_phase_table(rows):
    """fsdp: where the model puts the communication, phase by phase, against the measured phases."""
    lines = ["| run | forward meas / pred (s) | backward meas / pred (s) | gradient_sync meas / pred (s) | "
             "collectives per step (model) | bytes sent per rank per step (model, MB) |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for row in rows:
        r, pr = row.run, row.predicted
        if r.strategy == "fsdp":
            lines.append(f"| {r.name} | {r.forward:.3f} / {pr.forward:.3f} | {r.backward:.3f} / {pr.backward:.3f} | "
                         f"{r.sync:.3f} / {pr.tail:.3f} | {pr.collectives} | {pr.network_bytes / 1e6:.1f} |")
    return lines if len(lines) > 2 else []


def memory_check_table(rows):
    """parallel.memory_per_rank's steady state (largest over ranks) against the model's."""
    lines = ["| run | strategy | ranks | held between steps, measured (MiB) | model (MiB) | error % |",
             "| --- | --- | ---: | ---: | ---: | ---: |"]
    for row in rows:
        r = row.run
        if r.held_bytes is not None:
            model = held_between_steps(r.config, r.strategy, r.world, r.bucket_mb)
            lines.append(f"| {r.name} | {r.strategy} | {r.world} | {r.held_bytes / MIB:.1f} | {model / MIB:.1f} | "
                         f"{fmt(percent(model, r.held_bytes), 2)} |")
    return lines if len(lines) > 2 else []


CHECK_NOTES = """
How to read this table:
- Per-step values are run totals / global_step (results.json `phase_seconds`, `train_step_seconds`; the
  first step is included in both, so they agree with each other).
- compute/step = data + forward + backward + optimizer phases as measured. The phase times are each
  the slowest rank's (max over ranks per phase), so their sum can exceed the real step.
- "exposed/step meas": ddp, zero1, zero2: the `gradient_sync` phase (the training thread waiting
  after backward, slowest rank); it includes waiting for a slower rank, which the alpha-beta model does
  not predict. fsdp: its gathers are waited for inside forward and backward, so it is fsdp's
  forward + backward + gradient_sync minus the mean forward + backward of the matching ddp runs (same
  link, ranks, model and batch, any bucket size: "forward, backward from"); n/a without one.
- "after backward: transfer meas" is `gradient_transfer_after_backward_seconds_mean` / steps: the
  reductions' transfer time after backward, waiting for other ranks left out; "pred" is the model's
  communication after backward (ddp/zero1/zero2: all of their exposed communication; fsdp: the
  reduce-scatters of the last units).
- Predicted step = measured data + forward + backward + optimizer compute + predicted exposed
  communication (+ zero1/zero2: predicted norm all-reduce and parameter all-gather; fsdp: the norm
  all-reduce) + the per-step 16-byte sample-count all-reduce. fsdp's forward and backward compute
  are the matching ddp runs' mean (one run's phases vary by up to ~25% on this VM). Collective times
  use the alpha and beta fitted to bench_allreduce on the same link and rank count, per operation
  (table above).
- zero1, zero2, fsdp: mpibert's optimizer phase contains the norm all-reduce (and zero1/zero2's
  parameter all-gather). Its compute is taken as the matching ddp runs' mean optimizer phase / p
  when there is one; otherwise the measured phase is used whole and those collectives are not
  predicted ("measured (incl. collectives)").
- err % = (predicted - measured) / measured.
- On this 2-core VM the MPI progress thread competes with compute and 3 ranks share 2 cores; the
  errors show how far a contention-free model is from that.
"""


def error_line(label, subset):
    """A row of the error tables: mean and largest |error| of the step and of the communication
    after backward over `subset` ("" where no run has a transfer after backward)."""
    step = [(abs(percent(r.predicted.step, r.run.step)), r.run.name) for r in subset]
    transfer = [abs(percent(r.predicted.tail, r.run.exposed_transfer)) for r in subset
                if math.isfinite(r.run.exposed_transfer) and r.run.exposed_transfer > 0]
    worst = max(step)
    return (f"| {label} | {len(subset)} | {sum(e for e, _ in step) / len(step):.1f} | {worst[0]:.1f} ({worst[1]}) | "
            f"{sum(transfer) / len(transfer):.1f} | {max(transfer):.1f} |") if transfer else ""


ERROR_HEADER = ["| runs | count | step: mean abs. error % | step: largest abs. error % (run) | "
                "after-backward transfer: mean abs. error % | largest % |",
                "| --- | ---: | ---: | --- | ---: | ---: |"]


def error_summary(rows):
    """Mean and largest |error| of the step and of the communication after backward, over all runs,
    per host count and per strategy: what the closing table quotes."""
    lines = ERROR_HEADER + [error_line("all", rows)]
    for hosts in sorted({r.run.hosts for r in rows}):
        lines.append(error_line(f"{hosts} hosts", [r for r in rows if r.run.hosts == hosts]))
    for strategy in STRATEGIES:
        subset = [r for r in rows if r.run.strategy == strategy]
        if subset:
            lines.append(error_line(strategy, subset))
    return [l for l in lines if l]


def dtype_label(run):
    return f"{run.reduce_dtype}/{run.param_dtype}"


DTYPE_ORDER = {"fp32/fp32": 0, "bf16/fp32": 1, "fp32/bf16": 2, "bf16/bf16": 3}


def pair_key(run):
    """Runs that differ in the wire dtype only (same link, ranks, strategy, bucket, model, batch)."""
    return (run.rate_mbit is None, run.rate_mbit or 0, run.hosts, STRATEGIES.index(run.strategy), run.bucket_mb,
            run.batch, run.seq_len, run.accumulation, json.dumps(run.config, sort_keys=True))


def reduced_precision_table(rows, runs, fits):
    """measured-bf16/: each run against the fp32 run of its pair (same link, ranks, strategy, bucket,
    model and batch): step measured and predicted, each as a ratio to the fp32 run's, the bytes
    handed to the reductions per step, and what the model says the wire dtype saves at this run's
    own compute (its prediction with fp32 on the wire, less its prediction)."""
    lines = ["| run | reduce / gather dtype | MB reduced per step: meas / model | exposed pred (s) | step meas (s) | "
             "step pred (s) | step err % | step vs fp32: meas | step vs fp32: pred | model: saved by the dtype (s) |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    base = {pair_key(row.run): row for row in rows if dtype_label(row.run) == "fp32/fp32"}
    for row in rows:
        r, pr, fp32 = row.run, row.predicted, base.get(pair_key(row.run))
        network = FittedNetwork(fits[(rate_token(r.rate_mbit), r.world)])
        as_fp32 = predict_run(dataclasses.replace(r, reduce_dtype="fp32", param_dtype="fp32"), runs, network).predicted
        ratios = (fmt(r.step / fp32.run.step), fmt(pr.step / fp32.predicted.step)) if fp32 and fp32 is not row else ("", "")
        saved = "" if dtype_label(r) == "fp32/fp32" else f"{as_fp32.step - pr.step:.3f}"
        lines.append(f"| {r.name} | {r.reduce_dtype} / {r.param_dtype} | {fmt(r.reduced_bytes / 1e6, 2)} / "
                     f"{pr.reduced_bytes / 1e6:.2f} | {pr.exposed:.3f} | {r.step:.3f} | {pr.step:.3f} | "
                     f"{fmt(percent(pr.step, r.step), 1)} | {ratios[0]} | {ratios[1]} | {saved} |")
    return lines


def reduced_precision_section(directory, measured, rows, runs, fits):
    """check.md's section on measured-bf16/ (bench/reduced_precision.sh hosts)."""
    rows = sorted(rows, key=lambda row: (pair_key(row.run), DTYPE_ORDER[dtype_label(row.run)]))
    def bench_folder(rate, p):  # as load_measured chose it
        own = os.path.exists(os.path.join(directory, f"allreduce-{rate}-{p}r.txt"))
        return os.path.basename(os.path.normpath(directory if own else measured))
    sources = sorted({bench_folder(rate, p) for rate, p in fits})
    lines = ["## Reduced-precision communication: fp32 against bf16 on the wire", "",
             f"Generated from `{os.path.basename(os.path.normpath(directory))}/` (bench/reduced_precision.sh hosts: "
             "each strategy with fp32 and with bf16 gradient reductions, fsdp also with bf16 parameter gathers, run "
             "back to back). The links' alpha and beta are fitted to the bench_allreduce files of "
             + ", ".join(f"`{source}/`" for source in sources) +
             " (the same shaped links; no link benchmark in this folder). fsdp's forward and backward compute, and "
             "the sharded strategies' optimizer compute, come from this folder's ddp runs of the same link, fp32 and "
             "bf16 alike (the wire dtype does not change the compute).", "",
             "\"MB reduced per step\" is results.json's `gradient_bytes_reduced_per_rank` / global_step (the bytes "
             "handed to the gradient reductions, in the wire dtype, ddp's fp32 mask of rows included) against the "
             "model's. \"step vs fp32\" is the step over the fp32 run's of the same pair; \"saved by the dtype\" is "
             "the model's step for this run with fp32 on the wire less its step as run.", ""]
    lines += reduced_precision_table(rows, runs, fits) + [""]
    phases = fsdp_phase_table(rows)
    if phases:
        lines += ["fsdp by phase (as in \"fsdp by phase\" above):", ""] + phases + [""]
    lines += ERROR_HEADER + [l for l in [error_line("all", rows)] + [
        error_line(f"reduce {dtype}", [r for r in rows if r.run.reduce_dtype == dtype]) for dtype in WIRE_BYTES] + [
        error_line(strategy, [r for r in rows if r.run.strategy == strategy]) for strategy in STRATEGIES
        if any(r.run.strategy == strategy for r in rows)] if l]
    return lines + [""]


def write_check(measured, out, plot=True, reduced_precision=None):
    """`reduced_precision`: a folder of bench/reduced_precision.sh runs (fp32/bf16 pairs), checked in
    a section of its own where it exists. Returns the rows of both."""
    runs, fits = load_measured(measured)
    rows = [predict_run(run, runs, FittedNetwork(fits[(rate_token(run.rate_mbit), run.world)])) for run in runs]
    lines = ["# Scaling model check: predicted vs measured (CPU, mpibert over MPI)", "",
             "Generated by `scaling_model.py check` from `measured/`.", "", "## Link fits (bench_allreduce)", ""]
    lines += fit_table(fits, runs)
    lines += ["", "## Step time and exposed communication", ""] + check_table(rows) + [CHECK_NOTES.rstrip(), ""]
    phases = fsdp_phase_table(rows)
    if phases:
        lines += ["## fsdp by phase", "", "The model's forward and backward phases are the matching ddp runs' compute "
                  "plus the waits for gathers; its gradient_sync is the reduce-scatters left after backward.", ""]
        lines += phases + [""]
    memory = memory_check_table(rows)
    if memory:
        lines += ["## Memory held between steps", "", "results.json `parallel.memory_per_rank` (largest "
                  "`steady_state_bytes` over ranks) against `held_between_steps` (README, Memory).", ""]
        lines += memory + [""]
    lines += ["## Errors", ""] + error_summary(rows) + [""]
    missing = [s for s in CHECKED_STRATEGIES if not any(r.run.strategy == s for r in rows)]
    if missing:
        lines += [f"No measured run of: {', '.join(missing)}.", ""]
    extra = []
    if reduced_precision is not None and os.path.isdir(reduced_precision):
        bf16_runs, bf16_fits = load_measured(reduced_precision, measured)
        extra = [predict_run(run, bf16_runs, FittedNetwork(bf16_fits[(rate_token(run.rate_mbit), run.world)]))
                 for run in bf16_runs]
        lines += reduced_precision_section(reduced_precision, measured, extra, bf16_runs, bf16_fits)
    mismatched = [r.run.name for r in rows + extra if r.run.buckets_measured != r.buckets_model]
    if mismatched:
        lines += [f"**Bucket count differs from mpibert's in: {', '.join(mismatched)}** (the model's bucket rule is wrong there).", ""]
    write_text(os.path.join(out, "check.md"), "\n".join(lines))
    if plot:
        plot_check(rows, os.path.join(out, "check.png"))
    return rows + extra


# ----------------------------------------------------------------------------------------
# Memory per GPU

def state_bytes_per_param(strategy, p, group=None):
    """(parameters, gradients, optimizer state) bytes per parameter a rank holds, fp32 + AdamW, as
    DataParallel allocates them. zero1 keeps the full gradient buckets and its reduced slices;
    zero2 holds a bucket's full gradient only from its first gradient to the end of its
    reduce-scatter (ZERO2_BUCKETS_IN_FLIGHT during backward). fsdp holds slices only; its whole units
    in flight are counted apart (units_in_flight). hsdp: fsdp's over its shard group of `group`
    ranks (the all-reduce across the replicas works in place on the slice)."""
    if strategy == "hsdp":
        strategy, p = "fsdp", shard_ranks("hsdp", p, group)
    if p <= 1:
        return 4.0, 4.0, 8.0
    return {"ddp": (4.0, 4.0, 8.0), "zero1": (4.0, 4.0 + 4 / p, 8 / p),
            "zero2": (4.0, 4 / p, 8 / p), "fsdp": (4 / p, 4 / p, 8 / p)}[strategy]


# zero2 during backward: full gradient buckets between their first gradient and the end of their
# reduce-scatter. At most one being filled and one being reduced (of 25 MiB, as projected): where
# backward starts, when the activations are at their peak, only the first (1 MiB) is there.
ZERO2_BUCKETS_IN_FLIGHT = 2 * 25 * MIB


def held_between_steps(config, strategy, world, bucket_mb, group=None):
    """Bytes a rank holds between steps, as DataParallel::memory_footprint counts them: flat
    buffers padded to a multiple of the ranks (hsdp: of its shard group); sharded optimizer state of
    a whole slice (rank 0's)."""
    params, groups = strategy_groups(config, strategy, bucket_mb, world, group=group)
    n = sum(q.numel for q in params)
    ranks = shard_ranks(strategy, world, group) if strategy == "hsdp" else world
    if ranks <= 1:
        return 16 * n
    padded = sum(g.numel for g in groups)
    shard = padded // ranks
    return {"ddp": 16 * n + 4 * (padded - n), "zero1": 8 * padded + 12 * shard,
            "zero2": 4 * padded + 12 * shard, "fsdp": 16 * shard, "hsdp": 16 * shard}[strategy]


def activation_bytes_per_token(config, precision):
    """Bytes autograd saves per token from a unit's forward to its backward: (embeddings, one
    encoder layer, QA head). e = 4 (fp32) or 2 (bf16 autocast). Per layer, as bert_qa.cpp computes it:
    fused QKV input e*h, Q/K/V (kept by attention) 3e*h, attention output e*h and its logsumexp 4*heads,
    context copy (attention.output.dense input) e*h, two dropout masks 2h (bool), two LayerNorm inputs
    in fp32 (autocast runs LayerNorm in fp32; the residual add is fp32) 8h + mean/rstd 16,
    intermediate.dense input e*h, GELU input and output 2e*I; bf16: the mask cast to bf16, 2.
    Embeddings: token and type ids 16, LayerNorm input 4h + 8, dropout mask h, the fp32 additive
    mask 4. QA head: its input e*h, the two log-softmaxes 8."""
    h, inter = config["hidden_size"], config["intermediate_size"]
    heads = config.get("num_attention_heads", 12)  # HF's BertConfig default
    e = 2 if precision == "bf16" else 4
    layer = e * (7 * h + 2 * inter) + 10 * h + 16 + 4 * heads + (2 if precision == "bf16" else 0)
    return 5 * h + 28, layer, e * h + 8


def saved_weight_bytes(config, precision):
    """Weight copies the forward saves for backward, whatever the strategy (fsdp's sharding does not
    free them): (embeddings, one layer, QA head). fp32: the fused QKV weight, torch::cat of three,
    3h^2 x 4. bf16 autocast: a bf16 copy of every Linear weight (the QKV cat cast, the others cached
    and saved by their matmuls), 2 bytes each."""
    h, inter = config["hidden_size"], config["intermediate_size"]
    if precision == "bf16":
        return 0, 2 * (4 * h * h + 2 * h * inter), 2 * 2 * h
    return 0, 4 * 3 * h * h, 0


def checkpointed_layer_bytes_per_token(config):
    """With activation checkpointing (--gradient-checkpointing) a layer keeps only its input: the
    previous LayerNorm's output, float32 under autocast too (4h)."""
    return 4 * config["hidden_size"]


def saved_bytes_per_unit(config, precision, seq_len, checkpointing=False):
    """Per unit in forward order: (bytes per sample of `seq_len` tokens, fixed bytes) that the
    forward saves for the backward: activations, and weight copies (none for checkpointed layers)."""
    emb, layer, head = activation_bytes_per_token(config, precision)
    w_emb, w_layer, w_head = saved_weight_bytes(config, precision)
    layers = config["num_hidden_layers"]
    kept = (checkpointed_layer_bytes_per_token(config) * seq_len, 0) if checkpointing else (layer * seq_len, w_layer)
    return [(emb * seq_len, w_emb)] + [kept] * layers + [(head * seq_len, w_head)]


def recomputed_layer(config, precision, seq_len, checkpointing):
    """What a checkpointed layer's recompute holds during its backward, one layer at a time: its
    whole activations and weight copies, (per sample, fixed) bytes; (0, 0) without checkpointing."""
    if not checkpointing:
        return 0, 0
    return activation_bytes_per_token(config, precision)[1] * seq_len, saved_weight_bytes(config, precision)[1]


def units_in_flight(units, u):
    """fsdp, during unit u's backward: its parameters and gradients whole, the unit before it being
    gathered, the gradients of the unit after it being reduce-scattered (bytes)."""
    whole = [4 * g.numel for g in units]
    before = whole[u - 1] if u > 0 else 0
    after = whole[u + 1] if u + 1 < len(units) else 0
    return 2 * whole[u] + before + after


def peak_candidates(config, strategy, p, seq_len, precision, checkpointing=False, group=None):
    """The moments that can hold the most, as (activation bytes per sample, model state, saved weight
    copies, fsdp's units in flight): the start of backward (model state as then held, everything the
    forward saved); fsdp: each position u of the backward (units 0..u still saved, units in flight).
    With checkpointing, one layer's recompute on top of what the layers kept (counted at every
    moment: the last layer's comes right after the QA head's backward). hsdp: fsdp's over its shard
    group of `group` ranks."""
    state = sum(state_bytes_per_param(strategy, p, group)) * total_params(config)
    saved = saved_bytes_per_unit(config, precision, seq_len, checkpointing)
    extra_a, extra_c = recomputed_layer(config, precision, seq_len, checkpointing)
    if strategy not in UNIT_STRATEGIES:
        flight = ZERO2_BUCKETS_IN_FLIGHT if strategy == "zero2" and p > 1 else 0
        return [(sum(a for a, _ in saved) + extra_a, state, sum(c for _, c in saved) + extra_c, flight)]
    units = build_units(parameter_list(config), shard_ranks(strategy, p, group), config["num_hidden_layers"])
    return [(sum(a for a, _ in saved[:u + 1]) + extra_a, state, sum(c for _, c in saved[:u + 1]) + extra_c,
             units_in_flight(units, u)) for u in range(len(units))]


def peak_memory_terms(config, strategy, p, seq_len, precision, checkpointing=False, group=None):
    """The most a rank holds during a step is max over terms of (per_sample x batch + fixed) bytes."""
    return [(a, state + copies + flight)
            for a, state, copies, flight in peak_candidates(config, strategy, p, seq_len, precision, checkpointing, group)]


def peak_breakdown(config, strategy, p, batch, seq_len, precision, group=None):
    """The peak's parts (bytes) at `batch`: {state, activations, weight copies, units in flight}."""
    a, state, copies, flight = max(peak_candidates(config, strategy, p, seq_len, precision, group=group),
                                   key=lambda c: c[0] * batch + c[1] + c[2] + c[3])
    return {"model state": state, "activations": a * batch, "saved weight copies": copies, "fsdp/hsdp units in flight": flight}


def peak_memory_bytes(terms, batch):
    return max(a * batch + c for a, c in terms)


def usable_memory_bytes(memory_gib, reserved_gib, fragmentation):
    """What the caching allocator can hand out: (memory - reserved) x (1 - fragmentation)."""
    return (memory_gib - reserved_gib) * GIB * (1 - fragmentation)


def largest_batch(terms, usable):
    """The largest batch whose peak fits in `usable` bytes (0: not even one sample)."""
    return max(0, min(math.floor((usable - c) / a) for a, c in terms))


# ----------------------------------------------------------------------------------------
# project: GPU clusters

def value(entry, path, key):
    if isinstance(entry, dict):
        if "value" not in entry:
            raise InputError(f"{path}: '{key}' has no 'value'")
        entry = entry["value"]
    if not isinstance(entry, (int, float)) or isinstance(entry, bool):
        raise InputError(f"{path}: '{key}' = {entry!r} is not a number")
    return float(entry)


def load_clusters(path):
    raw = read_json(path)
    for key in ("gpus_per_node", "collective_base_latency_us", "alpha_inter_us", "gpus", "networks", "optimizer",
                "compute_split", "workload"):
        if key not in raw:
            raise InputError(f"{path}: missing key '{key}'")
    for gpu, spec in raw["gpus"].items():
        for key in ("alpha_intra_us", "nvlink_busbw_GBps", "hbm_GBps", "step_samples_per_s"):
            if key not in spec:
                raise InputError(f"{path}: gpus.{gpu} has no '{key}'")
        value(spec[key], path, f"gpus.{gpu}.{key}")
        if "batch" not in spec["step_samples_per_s"]:
            raise InputError(f"{path}: gpus.{gpu}.step_samples_per_s has no 'batch'")
    for net, spec in raw["networks"].items():
        if "node_Gbit" not in spec:
            raise InputError(f"{path}: networks.{net} has no 'node_Gbit'")
    load_devices(raw, path)
    return raw


@dataclass
class Device:
    """A GPU with its memory; its step time is that of gpus.<compute>."""
    name: str
    compute: str
    memory_gib: float


def load_devices(raw, path):
    """(devices, reserved GiB, fragmentation fraction) from clusters.json's 'memory'."""
    memory = require(raw, "memory", path, dict)
    devices = []
    for name, spec in require(memory, "devices", f"{path} (memory)", dict).items():
        compute = require(spec, "compute", f"{path} (memory.devices.{name})", str)
        if compute not in raw["gpus"]:
            raise InputError(f"{path}: memory.devices.{name}.compute '{compute}' is not in 'gpus'")
        if "memory_GiB" not in spec:
            raise InputError(f"{path}: memory.devices.{name} has no 'memory_GiB'")
        devices.append(Device(name, compute, value(spec["memory_GiB"], path, f"memory.devices.{name}.memory_GiB")))
    for key in ("reserved_GiB", "fragmentation_fraction"):
        if key not in memory:
            raise InputError(f"{path}: memory has no '{key}'")
    fragmentation = value(memory["fragmentation_fraction"], path, "memory.fragmentation_fraction")
    if not 0 <= fragmentation < 1:
        raise InputError(f"{path}: memory.fragmentation_fraction = {fragmentation} is not in [0, 1)")
    return devices, value(memory["reserved_GiB"], path, "memory.reserved_GiB"), fragmentation


def make_cluster(raw, gpu, net, path):
    g = raw["gpus"][gpu]
    return Cluster(gpus_per_node=int(value(raw["gpus_per_node"], path, "gpus_per_node")),
                   nvlink_Bps=value(g["nvlink_busbw_GBps"], path, "nvlink_busbw_GBps") * 1e9,
                   net_Bps=value(raw["networks"][net]["node_Gbit"], path, "node_Gbit") * 1e9 / 8,
                   alpha_intra=value(g["alpha_intra_us"], path, "alpha_intra_us") * 1e-6,
                   alpha_inter=value(raw["alpha_inter_us"], path, "alpha_inter_us") * 1e-6,
                   base_latency=value(raw["collective_base_latency_us"], path, "collective_base_latency_us") * 1e-6)


@dataclass
class Compute:
    forward: float
    backward: float
    optimizer: float
    data: float


def gpu_compute(raw, gpu, config, base_config, path, samples_per_s=None):
    """One GPU's step at the workload's batch: bert-base from the reference throughput (or
    `samples_per_s`, bert-base's samples/s at that batch); the optimizer from HBM bandwidth;
    bert-large scaled by the parameter (6*params*tokens) ratio."""
    g, opt, split = raw["gpus"][gpu], raw["optimizer"], raw["compute_split"]
    batch = raw["workload"]["batch_per_gpu"]
    rate = samples_per_s if samples_per_s is not None else value(g["step_samples_per_s"], path, "step_samples_per_s")
    step_base = batch / rate
    bytes_per_param = value(opt["bytes_per_param"], path, "bytes_per_param")
    bandwidth = value(g["hbm_GBps"], path, "hbm_GBps") * 1e9 * value(opt["hbm_efficiency"], path, "hbm_efficiency")
    base_params, params = total_params(base_config), total_params(config)
    optimizer_base = base_params * bytes_per_param / bandwidth
    data = value(split["data_seconds"], path, "data_seconds")
    fwd_bwd = (step_base - optimizer_base - data) * params / base_params
    forward = fwd_bwd * value(split["forward_fraction"], path, "forward_fraction")
    return Compute(forward, fwd_bwd - forward, params * bytes_per_param / bandwidth, data)


@dataclass
class EmbeddingRows:
    """The word-embedding rows a global batch touches (bench_embedding_rows output), measured up to
    `trusted` features and extrapolated beyond along the last measured Heaps-law slope."""
    points: list   # (global batch in features, mean rows), ascending, up to `trusted`
    vocab: int

    def for_global_batch(self, features):
        (g0, r0), (g1, r1) = self.points[0], self.points[1]
        for (ga, ra), (gb, rb) in zip(self.points, self.points[1:]):
            if features <= gb:
                (g0, r0), (g1, r1) = (ga, ra), (gb, rb)
                break
        else:
            (g0, r0), (g1, r1) = self.points[-2], self.points[-1]
        slope = math.log(r1 / r0) / math.log(g1 / g0)
        return min(float(self.vocab), r0 * (features / g0) ** slope)


def load_embedding_rows(raw, path):
    spec = require(raw, "embedding_rows", path, dict)
    file = os.path.join(os.path.dirname(os.path.abspath(path)), require(spec, "file", f"{path} (embedding_rows)", str))
    trusted = require(spec, "trusted_up_to_features", f"{path} (embedding_rows)", int)
    table = read_json(file)
    points = [(require(row, "global_batch", file, int), require(row, "rows_mean", file))
              for row in require(table, "sizes", file, list)]
    points = sorted((g, r) for g, r in points if g <= trusted)
    if len(points) < 2 or any(r <= 0 for _, r in points):
        raise InputError(f"{file}: fewer than two sizes up to {trusted} features with rows")
    return EmbeddingRows(points, require(table, "vocab_size", file, int))


def project_point(config, compute, cluster, p, strategy, bucket_mb, seq_len, embedding_rows=None,
                  reduce_dtype="fp32", param_dtype="fp32"):
    """`embedding_rows`: ddp's sparse exchange sends that many rows (None: the embedding dense).
    hsdp's shard group is a node's GPUs (mpibert's default), fewer on fewer GPUs."""
    group = cluster.gpus_per_node
    optimizer = compute.optimizer / shard_ranks(strategy, p, group)
    inp = StepInput(compute.data, compute.forward, compute.backward, optimizer, strategy, p, len(parameter_list(config)),
                    embedding_rows if strategy == "ddp" else None, reduce_dtype, param_dtype, group)
    return simulate(config, seq_len, inp, bucket_mb, cluster)


def at_batch(compute, factor):
    """The same GPU at `factor` x the workload's batch: forward, backward and data scale with it
    (ASSUMPTION: samples/s does not depend on the batch), the optimizer does not."""
    return Compute(compute.forward * factor, compute.backward * factor, compute.optimizer, compute.data * factor)


def compute_seconds(compute, strategy, p, group):
    """What one step computes (no communication) under `strategy` on p GPUs (hsdp: shard groups of
    `group`, a node's GPUs in the projections)."""
    return compute.data + compute.forward + compute.backward + compute.optimizer / shard_ranks(strategy, p, group)


@dataclass
class Projection:
    model: str
    gpu: str
    net: str
    p: int
    default: StepResult      # ddp, 25 MiB (mpibert's default)
    best: StepResult
    best_label: str
    one_gpu: float
    strategies: dict = field(default_factory=dict)  # ddp/zero1/zero2 at 25 MiB, fsdp, "ddp dense": StepResult
    compute: Compute = None
    embedding_rows: float = 0.0  # the rows a step's global batch touches (ddp's sparse exchange)
    wire: dict = field(default_factory=dict)  # 25 MiB, bf16 on the wire: WIRE_VARIANTS' labels -> StepResult
    cluster: Cluster = None


# The reduced-precision variants `project` compares with fp32: (label, strategy, embedding rows by
# touched rows?, reduce dtype, param dtype).
WIRE_VARIANTS = [("ddp bf16", "ddp", True, "bf16", "fp32"), ("ddp dense bf16", "ddp", False, "bf16", "fp32"),
                 ("zero2 bf16", "zero2", True, "bf16", "fp32"), ("fsdp bf16", "fsdp", True, "bf16", "fp32"),
                 ("fsdp bf16 gathers", "fsdp", True, "bf16", "bf16"), ("hsdp bf16", "hsdp", True, "bf16", "fp32")]


def fastest_option(config, compute, cluster, p, seq_len, fsdp, rows, hsdp=None):
    """The fastest of ddp (sparse embedding exchange) and zero1/zero2 (same collectives, same time)
    x bucket sizes, fsdp and hsdp (units: no buckets)."""
    options = [(fsdp, "fsdp")] + ([(hsdp, "hsdp")] if hsdp is not None else [])
    for strategy, label in (("ddp", "ddp"), ("zero1", "zero1/zero2")):
        options += [(project_point(config, compute, cluster, p, strategy, mb, seq_len, rows), f"{label} {mb} MiB")
                    for mb in BUCKET_CHOICES_MB]
    return min(options, key=lambda o: (round(o[0].step, 12), o[1]))


def run_projections(raw, configs, path):
    batch, seq_len = raw["workload"]["batch_per_gpu"], raw["workload"]["seq_len"]
    embedding_rows = load_embedding_rows(raw, path)
    out = []
    for model, config in configs.items():
        for gpu in raw["gpus"]:
            compute = gpu_compute(raw, gpu, config, configs["bert-base"], path)
            for net in raw["networks"]:
                cluster = make_cluster(raw, gpu, net, path)
                one = project_point(config, compute, cluster, 1, "ddp", 25, seq_len).step
                for p in PROJECTION_GPUS:
                    rows = embedding_rows.for_global_batch(batch * p)
                    by_strategy = {s: project_point(config, compute, cluster, p, s, 25, seq_len, rows) for s in STRATEGIES}
                    by_strategy["ddp dense"] = project_point(config, compute, cluster, p, "ddp", 25, seq_len)
                    best, label = fastest_option(config, compute, cluster, p, seq_len, by_strategy["fsdp"], rows,
                                                 by_strategy["hsdp"])
                    if p == 1:
                        label = "(no communication)"
                    wire = {name: project_point(config, compute, cluster, p, strategy, 25, seq_len,
                                                rows if by_rows else None, reduce, param)
                            for name, strategy, by_rows, reduce, param in WIRE_VARIANTS}
                    out.append(Projection(model, gpu, net, p, by_strategy["ddp"], best, label, one, by_strategy, compute,
                                          rows, wire, cluster))
    return out, batch


def projection_tables(projections, batch, configs):
    lines = []
    groups = {}
    for pr in projections:
        groups.setdefault((pr.model, pr.gpu, pr.net), []).append(pr)
    for (model, gpu, net), rows in groups.items():
        params = total_params(configs[model])
        lines += [f"### {model}, {gpu}, {net} (8 GPUs per node)", "",
                  "| GPUs | nodes | ddp 25 MiB step (ms) | samples/s | speedup | efficiency | largest-bucket algo | "
                  "fastest (strategy, bucket) | its step (ms) | its efficiency | zero1 saves (GB/GPU) |",
                  "| ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | ---: | ---: | ---: |"]
        for pr in rows:
            d, b = pr.default, pr.best
            nodes = -(-pr.p // 8)
            eff, best_eff = pr.one_gpu / d.step, pr.one_gpu / b.step
            algo = max(set(d.algorithms), key=d.algorithms.count) if d.algorithms else "-"
            saving = 8 * params * (1 - 1 / pr.p) / 1e9
            lines.append(f"| {pr.p} | {nodes} | {d.step * 1e3:.1f} | {batch * pr.p / d.step:.0f} | {pr.p * eff:.2f} | "
                         f"{eff:.3f} | {algo} | {pr.best_label} | {b.step * 1e3:.1f} | {best_eff:.3f} | {saving:.2f} |")
        lines.append("")
    return lines


def recommendations(projections):
    lines = ["| model | GPU | network | fastest at 8 GPUs | at 64 | at 512 | efficiency at 512: fastest / ddp 25 MiB |",
             "| --- | --- | --- | --- | --- | --- | ---: |"]
    groups = {}
    for pr in projections:
        groups.setdefault((pr.model, pr.gpu, pr.net), {})[pr.p] = pr
    for (model, gpu, net), by_p in groups.items():
        lines.append(f"| {model} | {gpu} | {net} | {by_p[8].best_label} | {by_p[64].best_label} | "
                     f"{by_p[512].best_label} | {by_p[512].one_gpu / by_p[512].best.step:.3f} / "
                     f"{by_p[512].one_gpu / by_p[512].default.step:.3f} |")
    return lines


def sparse_embedding_table(projections, configs):
    """ddp 25 MiB with the word embedding dense (as DDP) and by touched rows (mpibert's default),
    bert-base; the last line, the rows touched, is the same for every GPU and network."""
    ps = [p for p in PROJECTION_GPUS if p >= 8]
    lines = ["| model | GPU | network | " + " | ".join(f"{p} GPUs" for p in ps) + " |",
             "| --- | --- | --- | " + " | ".join("---" for _ in ps) + " |"]
    groups = {}
    for pr in projections:
        if pr.model == "bert-base":
            groups.setdefault((pr.model, pr.gpu, pr.net), {})[pr.p] = pr
    for (model, gpu, net), by_p in groups.items():
        cells = [f"{by_p[p].one_gpu / by_p[p].strategies['ddp dense'].step:.3f} → "
                 f"{by_p[p].one_gpu / by_p[p].strategies['ddp'].step:.3f}" for p in ps]
        lines.append(f"| {model} | {gpu} | {net} | " + " | ".join(cells) + " |")
    if groups:
        by_p = next(iter(groups.values()))
        vocab = configs["bert-base"]["vocab_size"]
        lines.append("| rows touched (of the vocabulary) | | | " +
                     " | ".join(f"{100 * by_p[p].embedding_rows / vocab:.0f}%" for p in ps) + " |")
    return lines


def exposed_ms(pr, strategy, result=None):
    """Everything in the step that is not compute (communication the step waits for), ms."""
    result = result or pr.strategies[strategy]
    return (result.step - compute_seconds(pr.compute, strategy, pr.p, pr.cluster.gpus_per_node)) * 1e3


def wire_dtype_table(projections):
    """Efficiency with fp32 and with bf16 on the wire, 25 MiB buckets, at 64 and 512 GPUs."""
    lines = ["| model | GPU | network | GPUs | ddp | ddp, embedding dense | zero1/zero2 | "
             "fsdp: fp32 → bf16 reduce → also bf16 gathers | hsdp: fp32 → bf16 reduce | ddp exposed (ms) | "
             "MB sent per GPU per step: ddp | fsdp | hsdp |",
             "| --- | --- | --- | ---: | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for pr in projections:
        if pr.p not in (64, 512):
            continue
        w, st = pr.wire, pr.strategies
        def eff(result):
            return f"{pr.one_gpu / result.step:.3f}"
        lines.append(f"| {pr.model} | {pr.gpu} | {pr.net} | {pr.p} | {eff(st['ddp'])} → {eff(w['ddp bf16'])} | "
                     f"{eff(st['ddp dense'])} → {eff(w['ddp dense bf16'])} | {eff(st['zero2'])} → {eff(w['zero2 bf16'])} | "
                     f"{eff(st['fsdp'])} → {eff(w['fsdp bf16'])} → {eff(w['fsdp bf16 gathers'])} | "
                     f"{eff(st['hsdp'])} → {eff(w['hsdp bf16'])} | "
                     f"{exposed_ms(pr, 'ddp'):.1f} → {exposed_ms(pr, 'ddp', w['ddp bf16']):.1f} | "
                     f"{st['ddp'].network_bytes / 1e6:.0f} → {w['ddp bf16'].network_bytes / 1e6:.0f} | "
                     f"{st['fsdp'].network_bytes / 1e6:.0f} → {w['fsdp bf16'].network_bytes / 1e6:.0f} → "
                     f"{w['fsdp bf16 gathers'].network_bytes / 1e6:.0f} | "
                     f"{st['hsdp'].network_bytes / 1e6:.0f} → {w['hsdp bf16'].network_bytes / 1e6:.0f} |")
    return lines


def ddp_communication(pr, config, dtype):
    """ddp 25 MiB with the embedding by rows: (the buckets' all-reduces summed, the word embedding's
    exchange, the mask's all-reduce), seconds, as the FIFO runs them one after another."""
    _, groups = strategy_groups(config, "ddp", 25, pr.p, sparse_embedding=True)
    mask, rows = sparse_exchange_bytes(config, pr.embedding_rows, dtype)
    buckets = sum(pr.cluster.cost("all_reduce", g.wire_bytes(dtype), pr.p)[0] for g in groups[:-1])
    embedding = rows if rows is not None else groups[-1].wire_bytes(dtype)
    return buckets, pr.cluster.cost("all_reduce", embedding, pr.p)[0], pr.cluster.cost("all_reduce", mask, pr.p)[0]


def reduced_precision_paragraph(projections, configs, model="bert-base", gpu="H100", net="IB100", p=64):
    """What bf16 on the wire buys where the issue asked (bert-base ddp, 64 H100s, IB 100), and why."""
    pr = find_projection(projections, model, gpu, net, p)
    config, w, st = configs[model], pr.wire, pr.strategies
    b32, e32, mask = ddp_communication(pr, config, "fp32")
    b16, e16, _ = ddp_communication(pr, config, "bf16")
    backward = pr.compute.backward * 1e3
    doubled = [x for x in projections if (x.model, x.gpu, x.p) == (model, gpu, p) and x.cluster.net_Bps ==
               2 * pr.cluster.net_Bps]
    fits = "fit inside the backward" if b16 * 1e3 <= backward else "still outlast the backward"
    text = (f"{model} ddp (25 MiB, the word embedding by touched rows) on {p} {gpu}s over {net}: efficiency "
            f"{pr.one_gpu / st['ddp'].step:.3f} with fp32 reductions, {pr.one_gpu / w['ddp bf16'].step:.3f} with bf16 "
            f"(the embedding all-reduced whole: {pr.one_gpu / st['ddp dense'].step:.3f} → "
            f"{pr.one_gpu / w['ddp dense bf16'].step:.3f}); the exposed communication goes from "
            f"{exposed_ms(pr, 'ddp'):.1f} to {exposed_ms(pr, 'ddp', w['ddp bf16']):.1f} ms a step. In fp32 the "
            f"buckets' all-reduces take {b32 * 1e3:.1f} ms against a backward of {backward:.1f} ms, so they queue "
            f"past its end, and behind them the word embedding's rows ({pr.embedding_rows:,.0f} of "
            f"{config['vocab_size']:,}, ready only when backward ends) take {e32 * 1e3:.1f} ms that can never "
            f"overlap. bf16 halves both: the buckets' {b16 * 1e3:.1f} ms {fits}, and the rows' all-reduce takes "
            f"{e16 * 1e3:.1f} ms. What does not shrink: the mask of touched rows (fp32, "
            f"{4 * config['vocab_size'] / 1e3:.0f} KB, {mask * 1e3:.2f} ms, issued as backward starts), the norm "
            f"all-reduce and zero1/zero2's parameter all-gather after the step (fp32). So zero1/zero2 gain least "
            f"({pr.one_gpu / st['zero2'].step:.3f} → {pr.one_gpu / w['zero2 bf16'].step:.3f}): their reduce-scatters, "
            f"half an all-reduce's bytes, leave {st['zero2'].tail * 1e3:.1f} → {w['zero2 bf16'].tail * 1e3:.1f} ms "
            f"after backward, but the {st['zero2'].gather * 1e3:.1f} ms after the step stay. fsdp gains on its "
            f"reduce-scatters ({pr.one_gpu / st['fsdp'].step:.3f} → {pr.one_gpu / w['fsdp bf16'].step:.3f}) and most "
            f"on its gathers, twice as many, with `--param-dtype bf16` ({pr.one_gpu / w['fsdp bf16 gathers'].step:.3f}).")
    if doubled:
        faster = doubled[0].one_gpu / doubled[0].strategies["ddp"].step
        same = abs(faster - pr.one_gpu / w["ddp bf16"].step) < 5e-4  # the NIC, not NVLink, sets beta in both
        text += (f" {'Halving the bytes is worth a NIC twice as fast: f' if same else 'F'}p32 over "
                 f"{doubled[0].net} gives {faster:.3f}.")
    return text


def fsdp_exposed_split(pr):
    """fsdp's exposed communication: in forward / in backward / after backward + norm, ms."""
    r = pr.strategies["fsdp"]
    return ((r.forward - pr.compute.forward) * 1e3, (r.backward - pr.compute.backward) * 1e3,
            exposed_ms(pr, "fsdp") - (r.forward - pr.compute.forward + r.backward - pr.compute.backward) * 1e3)


def strategy_tables(projections):
    """Per model, GPU and network, 8-512 GPUs: ddp, zero1/zero2 (25 MiB) and fsdp side by side."""
    lines, groups = [], {}
    for pr in projections:
        if pr.p >= 8:
            groups.setdefault((pr.model, pr.gpu, pr.net), []).append(pr)
    for (model, gpu, net), rows in groups.items():
        lines += [f"### {model}, {gpu}, {net}: strategies", "",
                  "| GPUs | ddp step (ms) | ddp eff. | ddp exposed (ms) | zero1/zero2 step (ms) | zero1/zero2 eff. | "
                  "zero1/zero2 exposed (ms) | fsdp step (ms) | fsdp eff. | fsdp exposed (ms): forward / backward / after | "
                  "hsdp step (ms) | hsdp eff. | hsdp exposed (ms) | MB sent per GPU per step: ddp / zero / fsdp / hsdp |",
                  "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | --- |"]
        for pr in rows:
            d, z, f, h = (pr.strategies[s] for s in ("ddp", "zero2", "fsdp", "hsdp"))
            fw, bw, after = fsdp_exposed_split(pr)
            lines.append(f"| {pr.p} | {d.step * 1e3:.1f} | {pr.one_gpu / d.step:.3f} | {exposed_ms(pr, 'ddp'):.1f} | "
                         f"{z.step * 1e3:.1f} | {pr.one_gpu / z.step:.3f} | {exposed_ms(pr, 'zero2'):.1f} | "
                         f"{f.step * 1e3:.1f} | {pr.one_gpu / f.step:.3f} | {fw:.1f} / {bw:.1f} / {after:.1f} | "
                         f"{h.step * 1e3:.1f} | {pr.one_gpu / h.step:.3f} | {exposed_ms(pr, 'hsdp'):.1f} | "
                         f"{d.network_bytes / 1e6:.0f} / {z.network_bytes / 1e6:.0f} / {f.network_bytes / 1e6:.0f} / "
                         f"{h.network_bytes / 1e6:.0f} |")
        lines.append("")
    return lines


def strategy_summary(projections):
    lines = ["| model | GPU | network | efficiency at 64 GPUs: ddp / zero2 / fsdp / hsdp | at 512 GPUs: ddp / zero2 / "
             "fsdp / hsdp | fsdp exposed at 512 (ms): forward / backward / after |",
             "| --- | --- | --- | --- | --- | --- |"]
    groups = {}
    for pr in projections:
        groups.setdefault((pr.model, pr.gpu, pr.net), {})[pr.p] = pr
    for (model, gpu, net), by_p in groups.items():
        cells = [" / ".join(f"{by_p[p].one_gpu / by_p[p].strategies[s].step:.3f}"
                            for s in ("ddp", "zero2", "fsdp", "hsdp")) for p in (64, 512)]
        split = " / ".join(f"{x:.1f}" for x in fsdp_exposed_split(by_p[512]))
        lines.append(f"| {model} | {gpu} | {net} | {cells[0]} | {cells[1]} | {split} |")
    return lines


def traffic_paragraph(projections, configs):
    """Bytes each GPU sends per step, from the simulated collectives, at 64 GPUs."""
    lines = []
    for model, config in configs.items():
        pr = next(x for x in projections if x.model == model and x.p == 64)
        d, z, f, h = (pr.strategies[s].network_bytes for s in ("ddp", "zero2", "fsdp", "hsdp"))
        counts = [pr.strategies[s].collectives for s in ("ddp", "zero2", "fsdp", "hsdp")]
        lines.append(f"- {model} ({total_params(config):,} parameters, {4 * total_params(config) / 1e6:.0f} MB of fp32), "
                     f"64 GPUs: ddp {d / 1e6:.0f} MB, zero1/zero2 {z / 1e6:.0f} MB, fsdp {f / 1e6:.0f} MB, hsdp "
                     f"{h / 1e6:.0f} MB ({pr.strategies['hsdp'].node_bytes / 8e6:.0f} MB of it across the nodes) per GPU "
                     f"per step (fsdp / ddp = {f / d:.3f}); collectives per step: ddp {counts[0]}, zero1/zero2 {counts[1]}, "
                     f"fsdp {counts[2]}, hsdp {counts[3]}.")
    return lines


# ----------------------------------------------------------------------------------------
# project: hsdp beside ddp and fsdp at the measured and the target step (projection-hsdp.md)

HSDP_STRATEGIES = ("ddp", "fsdp", "hsdp")


@dataclass
class HsdpPoint:
    model: str
    rate: str       # clusters.json hsdp_projection.rates' label
    nodes: int
    net: str
    p: int
    compute: Compute
    one_gpu: float  # one GPU's step, no communication (the efficiency's numerator)
    results: dict   # (strategy, reduce dtype, batch factor) -> StepResult
    one_gpu_by_factor: dict = field(default_factory=dict)  # batch factor -> one GPU's step at that batch
    cluster: Cluster = None


def load_hsdp_projection(raw, path):
    spec = require(raw, "hsdp_projection", path, dict)
    where = f"{path} (hsdp_projection)"
    gpu = require(spec, "gpu", where, str)
    if gpu not in raw["gpus"]:
        raise InputError(f"{path}: hsdp_projection.gpu '{gpu}' is not in 'gpus'")
    networks = require(spec, "networks", where, list)
    for net in networks:
        if net not in raw["networks"]:
            raise InputError(f"{path}: hsdp_projection.networks: '{net}' is not in 'networks'")
    nodes = require(spec, "nodes", where, list)
    rates = {}
    for label, entry in require(spec, "rates", where, dict).items():
        rate = require(entry, "samples_per_s", f"{where} rates.{label}")
        if require(entry, "batch", f"{where} rates.{label}", int) != raw["workload"]["batch_per_gpu"]:
            raise InputError(f"{path}: hsdp_projection.rates.{label}.batch is not the workload's batch_per_gpu")
        rates[label] = float(rate)
    return gpu, networks, [int(n) for n in nodes], rates


# What hsdp's projection tries besides fp32 at batch 32: (label, reduce dtype, param dtype, batch factor).
HSDP_VARIANTS = [("fp32", "fp32", "fp32", 1), ("bf16 reduce", "bf16", "fp32", 1),
                 ("bf16 reduce, batch 64", "bf16", "fp32", 2)]


def run_hsdp_projections(raw, configs, path):
    gpu, networks, node_counts, rates = load_hsdp_projection(raw, path)
    seq_len, batch = raw["workload"]["seq_len"], raw["workload"]["batch_per_gpu"]
    per_node = node_gpus(raw, path)
    embedding_rows = load_embedding_rows(raw, path)
    points = []
    for model, config in configs.items():
        for label, rate in rates.items():
            compute = gpu_compute(raw, gpu, config, configs["bert-base"], path, samples_per_s=rate)
            for nodes in node_counts:
                for net in networks:
                    cluster, p = make_cluster(raw, gpu, net, path), nodes * per_node
                    results, ones = {}, {}
                    for _, reduce, param, factor in HSDP_VARIANTS:
                        scaled = at_batch(compute, factor)
                        ones[factor] = project_point(config, scaled, cluster, 1, "ddp", 25, seq_len).step
                        rows = embedding_rows.for_global_batch(batch * factor * p)
                        for strategy in HSDP_STRATEGIES:
                            results[(strategy, reduce, factor)] = project_point(
                                config, scaled, cluster, p, strategy, 25, seq_len, rows, reduce,
                                "bf16" if strategy in UNIT_STRATEGIES and reduce == "bf16" else param)
                    points.append(HsdpPoint(model, label, nodes, net, p, compute, ones[1], results, ones, cluster))
    return points, per_node


def hsdp_table(points, batch, per_node):
    lines = [f"| model | compute, samples/s per GPU | GPUs | network | strategy | step (ms) | samples/s | efficiency | "
             "exposed (ms) | inter-node MB per step per node |",
             "| --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for pt in points:
        for strategy in HSDP_STRATEGIES:
            r = pt.results[(strategy, "fp32", 1)]
            exposed = r.step - compute_seconds(pt.compute, strategy, pt.p, per_node)
            lines.append(f"| {pt.model} | {pt.rate} | {pt.nodes}x{per_node} | {pt.net} | {strategy} | {r.step * 1e3:.1f} | "
                         f"{batch * pt.p / r.step:,.0f} | {pt.one_gpu / r.step:.3f} | {exposed * 1e3:.1f} | "
                         f"{r.node_bytes / 1e6:.0f} |")
    return lines


def hsdp_wins_table(points):
    """Efficiency with bf16 reductions (fsdp: bf16 gathers too) and with batch 64, per strategy."""
    lines = ["| model | compute, samples/s per GPU | GPUs | network | " +
             " | ".join(f"{s}: fp32 → bf16 → bf16 batch 64" for s in HSDP_STRATEGIES) + " |",
             "| --- | --- | --- | --- | " + " | ".join("---" for _ in HSDP_STRATEGIES) + " |"]
    for pt in points:
        cells = [" → ".join(f"{pt.one_gpu_by_factor[factor] / pt.results[(s, reduce, factor)].step:.3f}"
                            for _, reduce, _, factor in HSDP_VARIANTS) for s in HSDP_STRATEGIES]
        lines.append(f"| {pt.model} | {pt.rate} | {pt.nodes}x{pt.p // pt.nodes} | {pt.net} | " + " | ".join(cells) + " |")
    return lines


def hsdp_breakdown(points, per_node):
    """Where hsdp's communication goes at fp32, batch 32: the units' gathers and reduce-scatters
    inside the node, the all-reduces across the nodes, against the backward."""
    lines = ["| model | compute, samples/s per GPU | GPUs | network | backward (ms) | hsdp's all-reduces across nodes, "
             "one after another (ms) | hsdp exposed: forward / backward / after backward (ms) | "
             "ddp exposed (ms) | fsdp exposed (ms) |",
             "| --- | --- | --- | --- | ---: | ---: | --- | ---: | ---: |"]
    for pt in points:
        h = pt.results[("hsdp", "fp32", 1)]
        fw, bw = h.forward - pt.compute.forward, h.backward - pt.compute.backward
        after = h.step - compute_seconds(pt.compute, "hsdp", pt.p, per_node) - fw - bw
        exposed = {s: (pt.results[(s, "fp32", 1)].step - compute_seconds(pt.compute, s, pt.p, per_node)) * 1e3
                   for s in ("ddp", "fsdp")}
        lines.append(f"| {pt.model} | {pt.rate} | {pt.nodes}x{per_node} | {pt.net} | {pt.compute.backward * 1e3:.1f} | "
                     f"{h.replica_seconds * 1e3:.1f} | {fw * 1e3:.1f} / {bw * 1e3:.1f} / {after * 1e3:.1f} | "
                     f"{exposed['ddp']:.1f} | {exposed['fsdp']:.1f} |")
    return lines


def find_hsdp_point(points, model, rate, nodes, net):
    return next(pt for pt in points if (pt.model, pt.rate, pt.nodes, pt.net) == (model, rate, nodes, net))


def hsdp_summary(points, configs, per_node):
    """The paragraph at the top of projection-hsdp.md, from the numbers below it."""
    rates = list(dict.fromkeys(pt.rate for pt in points))
    nodes, nets = max(pt.nodes for pt in points), min(dict.fromkeys(pt.net for pt in points))
    lines = []
    for model in configs:
        cells = []
        for rate in rates:
            pt = find_hsdp_point(points, model, rate, nodes, nets)
            eff = {s: pt.one_gpu / pt.results[(s, "fp32", 1)].step for s in HSDP_STRATEGIES}
            cells.append(f"at {rate} samples/s per GPU ddp {eff['ddp']:.3f}, fsdp {eff['fsdp']:.3f}, hsdp {eff['hsdp']:.3f}")
        pt = find_hsdp_point(points, model, rates[-1], nodes, nets)
        wins = {s: pt.one_gpu_by_factor[2] / pt.results[(s, "bf16", 2)].step for s in HSDP_STRATEGIES}
        bf16 = {s: pt.one_gpu / pt.results[(s, "bf16", 1)].step for s in HSDP_STRATEGIES}
        h, f, d = (pt.results[(s, "fp32", 1)] for s in ("hsdp", "fsdp", "ddp"))
        lines.append(f"- {model}, {nodes}x{per_node} H100 over {nets}: efficiency " + "; ".join(cells) +
                     f". At {rates[-1]}: bf16 reductions give ddp {bf16['ddp']:.3f}, fsdp (bf16 gathers too) "
                     f"{bf16['fsdp']:.3f}, hsdp {bf16['hsdp']:.3f}; with batch 64 as well ddp {wins['ddp']:.3f}, "
                     f"fsdp {wins['fsdp']:.3f}, hsdp {wins['hsdp']:.3f}. Each node sends {h.node_bytes / 1e6:.0f} MB "
                     f"a step under hsdp, {d.node_bytes / 1e6:.0f} MB under ddp (the word embedding by touched rows), "
                     f"{f.node_bytes / 1e6:.0f} MB under fsdp.")
    return lines


def hsdp_notes(points, configs, per_node):
    """projection-hsdp.md's assumptions, with the figures they lead to."""
    base = next(pt for pt in points if pt.model == "bert-base")
    ratio = total_params(configs["bert-large"]) / total_params(configs["bert-base"]) if "bert-large" in configs else 1.0
    return f"""## What this projects, and how

- **Compute per GPU**: one GPU's step at batch 32, sequence 384, from bert-base's samples/s per GPU
  (`clusters.json` `hsdp_projection.rates`, each with its source): 1,511 samples/s, what mpibert
  measured on one H200 (packed batches, bf16, 2026-11-26: 21.2 ms a step), and 3,000, the target of
  the GPU-step issue (10.7 ms). As in projection.md: the optimizer (HBM-bound, 32 bytes per
  parameter at 70% of the H100's HBM bandwidth: {base.compute.optimizer * 1e3:.1f} ms for bert-base) is
  taken out of that step, the rest is forward (1/3) and backward (2/3); bert-large is bert-base x
  the parameter ratio (x{ratio:.2f}); the sharded strategies run the optimizer on their slice (fsdp
  1/p, hsdp 1/{per_node}). Batch 64 doubles data, forward and backward (samples/s of one GPU assumed
  not to depend on the batch; projection.md's memory tables show batch 64 fits every strategy here).
- **Clusters**: H100 nodes of {per_node} GPUs, NVLink inside ({base.cluster.nvlink_Bps / 1e9:.0f} GB/s bus
  bandwidth, an assumption), one NIC of 100 or 200 Gbit/s per node (InfiniBand; a DGX H100 has 8:
  the pessimistic case), NCCL's latencies, as projection.md.
- **ddp**: 25 MiB buckets all-reduced during backward across all GPUs, the word embedding by the
  rows the global batch touched (mpibert's default). **fsdp**: its units gathered and
  reduce-scattered across all GPUs (each ring crossing every node's NIC). **hsdp**: fsdp inside
  each node (the shard group, {per_node} GPUs, NVLink only), then each unit's slice (1/{per_node} of it)
  all-reduced across the nodes among the GPUs of the same position, issued as soon as the unit's
  reduce-scatter is seen done, on a stream of its own. The {per_node} GPUs of a node run their
  all-reduces at once through the node's one NIC, each getting 1/{per_node} of its rate, so a unit's
  all-reduce takes what one all-reduce of the whole unit would through the NIC (2(n-1)/n x the
  unit's bytes / the NIC's rate, n nodes) plus the latency of a ring (or tree) over the n nodes.
  Nothing else crosses the nodes: no gathers, and the norm all-reduce stays in the node.
- **Inter-node bytes per step per node**: what leaves a node through its NIC in a step (the ring
  formulas; as much comes in). A ring over all p GPUs crosses each node's NIC once each way, so for
  ddp and fsdp it is what one GPU sends (ddp: 2(p-1)/p x the gradients, less where the word
  embedding goes by rows); for hsdp it is {per_node} x one all-reduce of a GPU's slice across the n
  nodes, 2(n-1)/n x the gradients' bytes: about what ddp sends, and about a third less than fsdp,
  whose gathers in forward and backward cross the nodes too. So with one NIC per node hsdp and ddp
  push about the same bytes through it, and hsdp's gain on ddp is small: rings over n nodes rather
  than p GPUs (fewer latency steps, 2(n-1)/n rather than 2(p-1)/p) and the optimizer on
  1/{per_node}, against ddp's word embedding by touched rows; its memory is fsdp's over {per_node}
  GPUs. On fsdp it gains the gathers.
- **Efficiency**: one GPU's step (no communication, the whole optimizer) / the step on p GPUs at the
  same batch per GPU; the sharded strategies could pass 1 by the optimizer time they save.
- Not modelled, as in projection.md: NCCL protocols, NVLS/SHARP, NCCL kernels slowing compute, and
  contention between a node's NVLink traffic and its NIC traffic (taken as independent: the
  replicas' all-reduces go from GPU to NIC over PCIe, the shard group's collectives over NVLink).
"""


def write_hsdp_projection(raw, configs, path, out):
    """projection-hsdp.md: ddp, fsdp and hsdp on clusters.json's hsdp_projection clusters and rates."""
    points, per_node = run_hsdp_projections(raw, configs, path)
    batch = raw["workload"]["batch_per_gpu"]
    rates = " and ".join(f"{r}" for r in dict.fromkeys(pt.rate for pt in points))
    lines = ["# Scaling projection: hsdp beside fsdp and ddp", "",
             "Generated by `scaling_model.py project` from `clusters.json` (`hsdp_projection`; every input there has "
             f"its source). bert-base and bert-large, batch {batch} per GPU, sequences of {raw['workload']['seq_len']}, "
             f"fp32 gradients on the wire unless a column says bf16, at {rates} samples/s of compute per GPU.", "",
             "## In short", ""]
    lines += hsdp_summary(points, configs, per_node)
    lines += ["", "A faster step leaves less backward to hide communication behind: compare each strategy's rows at the "
              "two rates. hsdp keeps the gathers inside the node and sends the gradients across the nodes once "
              "(fsdp sends them, and the parameters twice, through every node's NIC), but its all-reduce of the "
              "embeddings unit, the last to finish backward, cannot hide; ddp sends that table by its touched rows.",
              "", "## Step, throughput, efficiency and inter-node traffic (fp32 on the wire, batch 32 per GPU)", ""]
    lines += hsdp_table(points, batch, per_node)
    lines += ["", "## What bf16 reductions and a larger batch win back", "",
              "Efficiency with fp32 reductions, with bf16 reductions (`--reduce-dtype bf16`; fsdp and hsdp also "
              "`--param-dtype bf16` gathers), and with bf16 at batch 64 per GPU (its efficiency against one GPU "
              "at batch 64):", ""]
    lines += hsdp_wins_table(points)
    lines += ["", "## Where hsdp's communication goes (fp32, batch 32)", "",
              "The all-reduces across nodes, summed as if one after another, against the backward they hide behind; "
              "hsdp's exposed communication by phase (forward: waits for gathers; after backward: what is left of "
              "the reduce-scatters and the all-reduces across nodes, and the norm all-reduce), and ddp's and "
              "fsdp's exposed total:", ""]
    lines += hsdp_breakdown(points, per_node) + ["", hsdp_notes(points, configs, per_node)]
    write_text(os.path.join(out, "projection-hsdp.md"), "\n".join(lines))
    return points


# ----------------------------------------------------------------------------------------
# project: memory per GPU

def node_gpus(raw, path):
    """clusters.json's GPUs per node: hsdp's shard group in the projections (mpibert's default)."""
    return int(value(raw["gpus_per_node"], path, "gpus_per_node"))


def batch_table(raw, configs, path):
    """{(model, precision, device, strategy): [largest batch at each p >= 8]}."""
    devices, reserved, fragmentation = load_devices(raw, path)
    seq_len, group = raw["workload"]["seq_len"], node_gpus(raw, path)
    table = {}
    for model, config in configs.items():
        for precision in PRECISIONS:
            for device in devices:
                usable = usable_memory_bytes(device.memory_gib, reserved, fragmentation)
                for strategy in STRATEGIES:
                    table[(model, precision, device.name, strategy)] = [
                        largest_batch(peak_memory_terms(config, strategy, p, seq_len, precision, group=group), usable)
                        for p in PROJECTION_GPUS if p >= 8]
    return table


def memory_inputs(raw, configs, path):
    """What the peak is made of, per model and precision."""
    seq_len, group = raw["workload"]["seq_len"], node_gpus(raw, path)
    lines = [f"| model | precision | activations per sample of {seq_len} tokens (MB) | saved weight copies (MB) | "
             "state at the start of backward, GB per GPU at 8 / 512 GPUs: ddp | zero1 | zero2 (+ buckets in flight) | "
             f"fsdp (+ units in flight) | hsdp, groups of {group} (+ units in flight) |",
             "| --- | --- | ---: | ---: | --- | --- | --- | --- | --- |"]
    for model, config in configs.items():
        n = total_params(config)
        units = build_units(parameter_list(config), 8, config["num_hidden_layers"])
        in_flight = max(units_in_flight(units, u) for u in range(len(units))) / 1e9
        for precision in PRECISIONS:
            saved = saved_bytes_per_unit(config, precision, seq_len)
            state = [" / ".join(f"{sum(state_bytes_per_param(s, p, group)) * n / 1e9:.2f}" for p in (8, 512))
                     for s in ("ddp", "zero1", "zero2", "fsdp", "hsdp")]
            lines.append(f"| {model} | {precision} | {sum(a for a, _ in saved) / 1e6:.1f} | {sum(c for _, c in saved) / 1e6:.0f} | "
                         f"{state[0]} | {state[1]} | {state[2]} (+ at most {ZERO2_BUCKETS_IN_FLIGHT / 1e9:.2f}) | "
                         f"{state[3]} (+ at most {in_flight:.2f}) | {state[4]} (+ at most {in_flight:.2f}) |")
    return lines


def checkpointing_table(raw, configs, path):
    """The largest batch per GPU at 64 GPUs without and with activation checkpointing, and the
    activations a sample keeps (MB) each way."""
    devices, reserved, fragmentation = load_devices(raw, path)
    seq_len = raw["workload"]["seq_len"]
    lines = ["| model | precision | activations per sample (MB): without / with | GPU | " +
             " | ".join(f"{s}: without / with" for s in STRATEGIES) + " |",
             "| --- | --- | --- | --- | " + " | ".join("---" for _ in STRATEGIES) + " |"]
    for model, config in configs.items():
        for precision in PRECISIONS:
            per_sample = [sum(a for a, _ in saved_bytes_per_unit(config, precision, seq_len, c)) +
                          recomputed_layer(config, precision, seq_len, c)[0] for c in (False, True)]
            for device in devices:
                usable = usable_memory_bytes(device.memory_gib, reserved, fragmentation)
                cells = [" / ".join(str(largest_batch(peak_memory_terms(config, s, 64, seq_len, precision, c,
                                                                       node_gpus(raw, path)), usable))
                                    for c in (False, True)) for s in STRATEGIES]
                lines.append(f"| {model} | {precision} | {per_sample[0] / 1e6:.1f} / {per_sample[1] / 1e6:.1f} | "
                             f"{device.name} | " + " | ".join(cells) + " |")
    return lines


def largest_batch_tables(table, configs, devices):
    lines = []
    ps = [p for p in PROJECTION_GPUS if p >= 8]
    for model in configs:
        for precision in PRECISIONS:
            lines += [f"### {model}, {precision}: largest batch per GPU", "",
                      "| GPU | strategy | " + " | ".join(f"{p} GPUs" for p in ps) + " |",
                      "| --- | --- | " + " | ".join("---:" for _ in ps) + " |"]
            for device in devices:
                for strategy in STRATEGIES:
                    cells = " | ".join(str(b) for b in table[(model, precision, device.name, strategy)])
                    lines.append(f"| {device.name} | {strategy} | {cells} |")
            lines.append("")
    return lines


def throughput_at_largest_batch(raw, configs, table, path):
    """bf16, 64 and 512 GPUs: each strategy at its own largest batch; samples/s per GPU
    (compute per sample as at the workload's batch: see at_batch)."""
    devices, _, _ = load_devices(raw, path)
    batch, seq_len = raw["workload"]["batch_per_gpu"], raw["workload"]["seq_len"]
    embedding_rows = load_embedding_rows(raw, path)
    ps = [p for p in PROJECTION_GPUS if p >= 8]
    lines = ["| model | GPU | network | GPUs | ddp: batch, samples/s/GPU | zero2: batch, samples/s/GPU | "
             "fsdp: batch, samples/s/GPU | hsdp: batch, samples/s/GPU | fsdp / ddp | hsdp / ddp |",
             "| --- | --- | --- | ---: | --- | --- | --- | --- | ---: | ---: |"]
    for model, config in configs.items():
        for device in devices:
            compute = gpu_compute(raw, device.compute, config, configs["bert-base"], path)
            for net in raw["networks"]:
                cluster = make_cluster(raw, device.compute, net, path)
                for p in (64, 512):
                    rates = {}
                    for strategy in ("ddp", "zero2", "fsdp", "hsdp"):
                        b = table[(model, "bf16", device.name, strategy)][ps.index(p)]
                        rows = embedding_rows.for_global_batch(b * p)
                        step = project_point(config, at_batch(compute, b / batch), cluster, p, strategy, 25, seq_len, rows).step
                        rates[strategy] = (b, b / step if b else 0.0)
                    cells = " | ".join(f"{b}, {r:.0f}" for b, r in rates.values())
                    ratios = [rates[s][1] / rates["ddp"][1] if rates["ddp"][1] else float("nan") for s in ("fsdp", "hsdp")]
                    lines.append(f"| {model} | {device.name} | {net} | {p} | {cells} | {fmt(ratios[0], 3)} | "
                                 f"{fmt(ratios[1], 3)} |")
    return lines


def memory_section(raw, configs, batches, path):
    """projection.md's 'Memory per GPU': what is counted, its parts, the largest batches, and
    throughput at them."""
    devices, reserved, fragmentation = load_devices(raw, path)
    usable = ", ".join(f"{d.name} {usable_memory_bytes(d.memory_gib, reserved, fragmentation) / GIB:.1f} GiB" for d in devices)
    lines = [MEMORY_NOTES, f"Memory available to the allocator: {usable}.", ""]
    lines += memory_inputs(raw, configs, path) + [""] + largest_batch_tables(batches, configs, devices)
    lines += ["### With activation checkpointing (--gradient-checkpointing), 64 GPUs", "",
              "Each layer keeps its input alone (float32, 4 x hidden bytes per token); during backward one layer "
              "at a time is recomputed and holds its whole activations and weight copies again. Largest batch per "
              "GPU without / with:", ""]
    lines += checkpointing_table(raw, configs, path) + [""]
    lines += ["### Throughput at each strategy's largest batch (bf16)", "",
              "Compute per sample as at batch 32 (ASSUMPTION: samples/s of one GPU does not depend on the batch); "
              "communication per step does not grow with the batch, so a larger batch hides more of it.", ""]
    return lines + throughput_at_largest_batch(raw, configs, batches, path)


def find_projection(projections, model, gpu, net, p):
    for pr in projections:
        if (pr.model, pr.gpu, pr.net, pr.p) == (model, gpu, net, p):
            return pr
    raise KeyError((model, gpu, net, p))


def published_comparison(projections):
    a8 = find_projection(projections, "bert-large", "A100", "IB400", 8)
    b8 = find_projection(projections, "bert-base", "A100", "IB400", 8)
    h256 = find_projection(projections, "bert-base", "H100", "IB400", 256)
    return f"""## Comparison with published figures

Model figures quoted are for ddp with 25 MiB buckets (speedup = p x efficiency at a fixed batch per GPU).

| source | what exactly | published | this model |
| --- | --- | --- | --- |
| NVIDIA DeepLearningExamples, https://github.com/NVIDIA/DeepLearningExamples/blob/002bcd8c45a0ae4bdf2f01918ab22e0752ffa3e6/TensorFlow/LanguageModeling/BERT/README.md, section "Fine-tuning training performance for SQuAD v1.1 on DGX A100 40GB" (TensorFlow 20.06-py3 container; the model is not named in the table, BERT-large assumed as the README's SQuAD default) | sentences/s, 1 / 4 / 8 A100 40GB, batch/GPU 32 (mixed) and 16 (TF32) | mixed precision 102.26 / 366.353 / 518.898 (x5.07 at 8); TF32 61.364 / 223.187 / 440.47 (x7.18 at 8). The table's "weak scaling" columns (TF32 5.07, mixed 7.18) appear swapped relative to the throughputs. | bert-large, A100, 8 GPUs: x{a8.p * a8.one_gpu / a8.default.step:.2f} |
| same repository, a TensorFlow BERT README for the 21.02-py3 container (stored copy; its path, probably TensorFlow2/LanguageModeling/BERT/README.md, not verified), "Fine-tuning training performance for SQuAD v1.1 on NVIDIA DGX A100 (8x A100 80GB)" | sequences/s, 1 and 8 GPUs, batch/GPU 76 (mixed) / 38 (TF32) | mixed 134.22 -> 1048.23 (x7.81); FP32/TF32 43.9 -> 341.31 (x7.77) | bert-large, A100, 8 GPUs: x{a8.p * a8.one_gpu / a8.default.step:.2f} (batch 32) |
| same TensorFlow BERT README (another stored version of it), "Fine-tuning training performance for SQuAD v1.1 on DGX-2 32GB" (V100, NVSwitch, TensorFlow 20.06-py3) | sentences/s, 1 / 4 / 8 / 16 V100, batch/GPU 24 / 10 | mixed 55.28 / 199.53 / 341.55 / 683.37 (x12.36 at 16); FP32 32.72 / 100.73 / 168.92 / 249.54 (x7.63 at 16) | (V100 not modelled) |
| Li et al., "PyTorch Distributed: Experiences on Accelerating Data Parallel Training", VLDB 2020 (abstract, https://huggingface.co/papers/2006.15704) | DDP with bucketing and overlap | "attains near-linear scalability using 256 GPUs" (abstract; the paper's BERT and bucket-size figures were not read here: not verified) | bert-base, H100, IB400, 256 GPUs: efficiency {h256.one_gpu / h256.default.step:.3f} (ddp 25 MiB), {h256.one_gpu / h256.best.step:.3f} ({h256.best_label}) |
| pytorch/pytorch issue #118421 (https://github.com/pytorch/pytorch/issues/118421) | DDP's default bucket_cap_mb | "Default 25mb bucket size is very small and most users would have to increase it" (a feature request, no measurement) | see the fastest bucket per configuration above |
| the issue's user reference (not verified) | HF Trainer, 1x A100-PCIe, bert-base, batch 24 | 275 samples/s | used as the A100 compute input (x 32/24 batch assumed to keep samples/s) |
| the issue's user reference (not verified) | Lightning Fabric, 2x A100-PCIe, SQuAD v2.0, batch 8, 2 epochs | ddp 997 s vs 5,109 s for its 1-GPU baseline (x5.1 on 2 GPUs) | bert-base, A100, 2 GPUs: x{find_projection(projections, 'bert-base', 'A100', 'IB100', 2).p * find_projection(projections, 'bert-base', 'A100', 'IB100', 2).one_gpu / find_projection(projections, 'bert-base', 'A100', 'IB100', 2).default.step:.2f} |

On the Lightning figure: data parallelism over 2 GPUs cannot exceed x2 for the same work per sample;
x5.1 means the two runs did different work per sample (e.g. a different precision, padding, number of
steps or data-loader setup, or a baseline run that was itself slowed). It says nothing about
communication; compare like with like (same precision, padding and samples) before reading a speedup.

The model's 8-GPU bert-large A100 figure (x{a8.p * a8.one_gpu / a8.default.step:.2f}) sits with the TF32 and
DGX A100 80GB figures (x7.2-7.8), above the 40GB mixed-precision one (x5.07), where something other
than the gradient all-reduce (the model has NVLink at 235 GB/s) limited NVIDIA's run. bert-base's 8-GPU
A100 figure: x{b8.p * b8.one_gpu / b8.default.step:.2f}.
"""


SPARSE_EMBEDDING_NOTES = """The word embedding (23.4M of bert-base's 108.9M parameters) is the last gradient backward
produces, so its all-reduce is never hidden. mpibert's ddp all-reduces only the rows the step's
global batch touched (`--embedding-exchange sparse`, the default), after a mask of those rows
(vocabulary x 4 bytes) all-reduced as backward starts. How many rows a global batch touches is
measured on SQuAD v1.1 dev features (`embedding_rows.json`, `bench_embedding_rows`) up to 1,024
features and extrapolated beyond (clusters.json `embedding_rows`: an assumption). The model
treats the rows' all-reduce as any all-reduce of that many bytes; the copies in and out
(index_select, index_copy_) and the host's wait for the union's size are not modelled."""

REDUCED_PRECISION_NOTES = """With `--reduce-dtype bf16` every gradient reduction moves 2 bytes per element instead of 4:
ddp's bucket all-reduces and its word embedding's rows, zero1/zero2/fsdp's reduce-scatters; with
`--param-dtype bf16` fsdp's parameter gathers in forward and backward too. The buckets stay as they
are (capacity in fp32 bytes); ddp's mask of touched rows, the norm all-reduce, the sample count and
zero1/zero2's parameter all-gather after the step stay fp32. The casts and the bf16 sum's rounding
are not charged (elementwise, small against the transfer), and the projection's other tables keep
fp32 on the wire (mpibert's default)."""

PROJECTION_NOTES = """## What the projection assumes

- One GPU's step at batch 32, sequence 384: bert-base from the reference throughput (A100: HF Trainer
  275 samples/s, A100-PCIe, the issue's figure, assumed to hold at batch 32; H100: HF Trainer bf16 batch
  32 padded, 569-612 samples/s measured on this project's H100, midpoint 590). The optimizer (AdamW,
  32 bytes of HBM traffic per parameter at 70% of peak HBM bandwidth) is taken out of it; the rest is
  forward (1/3) + backward (2/3). bert-large = bert-base x params ratio (6*params*tokens FLOPs).
  The plain PyTorch loop on the H100 (729 samples/s) would make compute 19% shorter and scaling a
  little worse.
- Gradients in fp32 (4 bytes per parameter; bf16 only in "Reduced-precision communication"), bucketed
  as mpibert does; ready times from the FLOP share of each parameter's backward; buckets reduced one at
  a time in order (NCCL stream).
- Inside a node: NVLink bus bandwidth (A100 235 GB/s from NCCL's own model; H100 353 GB/s, an
  assumption). Across nodes: one NIC of the stated rate per node (a DGX has 8: this is the pessimistic
  case), and a multi-node ring pushes 2(p-1)/p x bucket bytes through each node's NIC, so
  beta_eff = 1/min(NVLink, network). Latencies per ring step from NCCL's tuning.cc (3.4 us NVLink,
  9.6 us network, 8.4 us base). The all-reduce algorithm is the faster of ring and tree; "largest-bucket
  algo" says which one the default configuration used most.
- zero1: reduce-scatter during backward, optimizer on 1/p of the state, then the all-gather of the
  parameters (exposed). It moves as many bytes as ddp's all-reduce, but the all-gather cannot overlap,
  so it is the faster choice only when the optimizer time it saves (optimizer x (1 - 1/p)) exceeds the
  exposed all-gather. Its memory saving: 8 bytes per parameter (AdamW moments) x (1 - 1/p).
- zero2: the same collectives as zero1 (mpibert reduce-scatters zero1's buckets too), so the same
  step time; it differs in memory only.
- fsdp (FULL_SHARD): the flat groups are the units (embeddings, each encoder layer, the QA head),
  gathered before their forward with the next one prefetched, gathered again at the start of their
  backward with the one before prefetched, reduce-scattered when their backward ends; all on one
  stream in the order of mpibert's plan (3U-1 collectives per micro-batch, U units); each unit's
  forward and backward take its share of the backward FLOPs. No all-gather after the step (the
  parameters stay sharded); the norm all-reduce and the optimizer on 1/p as zero1.
- hsdp (HYBRID_SHARD): fsdp inside each node (shard group of 8, NVLink), each unit's slice then
  all-reduced across the nodes as soon as its reduce-scatter is done, on a stream of its own; the
  8 GPUs of a node share its NIC, so a unit's all-reduce across the nodes takes as long as one of
  the whole unit through the NIC. Optimizer on 1/8. More in projection-hsdp.md.
- Not modelled: NCCL protocols (LL/LL128), NVLS/SHARP, contention of NCCL kernels with compute, stragglers,
  data loading, the evaluation phase, and mpibert's GPU path (which has not yet run on a GPU).
"""


MEMORY_NOTES = """## Memory per GPU: what is counted

The largest batch per GPU (sequences of 384) whose peak fits in (memory - reserved) x (1 -
fragmentation), both ASSUMPTIONS in `clusters.json`. The peak is at the start of backward (fsdp: the
largest over the backward's position), the sum of:
- model state, fp32 + AdamW, bytes per parameter: ddp 16; zero1 4 + 4 + 12/p (the full gradient buckets
  and its reduced slices); zero2 4 + 12/p, plus the gradient buckets in flight (a bucket's full
  gradient exists from its first gradient to the end of its reduce-scatter: counted as two 25 MiB
  buckets); fsdp 16/p, plus the units in flight (the unit in backward, its parameters and
  gradients whole, the one before it being gathered, the gradients of the one after it being
  reduce-scattered); hsdp 16/G over its shard group of G = 8 (a node's GPUs) whatever p, plus
  fsdp's units in flight;
- activations autograd saves, per token and encoder layer, e = 2 bytes (bf16 autocast) or 4 (fp32):
  e(7h + 2I) + 10h + 16 + 4a (+2 for bf16) bytes: bf16 40h, fp32 70h for I = 4h; attention through
  `scaled_dot_product_attention`'s memory-efficient kernel, which keeps no seq x seq tensor (README);
- weight copies the forward saves for backward, not sharded by fsdp: fp32 the fused QKV weight
  (torch::cat, 12h^2 bytes per layer); bf16 a 2-byte copy of every Linear weight.
"""


def write_projection(clusters_path, out, plot=True):
    raw = load_clusters(clusters_path)
    configs = {"bert-base": load_config(os.path.join(INPUTS, "bert-base-config.json")),
               "bert-large": load_config(os.path.join(INPUTS, "bert-large-config.json"))}
    projections, batch = run_projections(raw, configs, clusters_path)
    batches = batch_table(raw, configs, clusters_path)
    lines = ["# Scaling projection: mpibert data-parallel BERT on GPU clusters", "",
             "Generated by `scaling_model.py project` from `clusters.json` (every input there has its source).",
             f"Batch {batch} per GPU, sequences of {raw['workload']['seq_len']}; p = GPUs, 8 per node; "
             "efficiency = one GPU's step / p GPUs' step (weak scaling).", "",
             f"Parameters: bert-base {total_params(configs['bert-base']):,}, bert-large {total_params(configs['bert-large']):,} "
             "(BertForQuestionAnswering, no pooler).", "",
             "## Recommended configuration (fastest of ddp, zero1/zero2 x buckets 1, 5, 10, 25, 50, 100 MiB, fsdp and "
             "hsdp)", ""]
    lines += recommendations(projections) + ["", PROJECTION_NOTES]
    lines += ["## The word embedding by touched rows (ddp, 25 MiB buckets)", "", SPARSE_EMBEDDING_NOTES, "",
              "Efficiency, the embedding all-reduced dense → by the rows the global batch touched "
              f"(batch {batch} per GPU; over {100 * SPARSE_ROWS_MAX_FRACTION:.0f}% of the vocabulary it goes dense):", ""]
    lines += sparse_embedding_table(projections, configs)
    lines += ["", "## Reduced-precision communication (--reduce-dtype bf16, fsdp's --param-dtype bf16)", "",
              REDUCED_PRECISION_NOTES, "", reduced_precision_paragraph(projections, configs), "",
              "Efficiency fp32 → bf16 reductions (25 MiB buckets; fsdp also with bf16 gathers), the ddp step's exposed "
              "communication and the bytes each GPU sends:", ""]
    lines += wire_dtype_table(projections)
    lines += ["", "## Strategies at 64 and 512 GPUs (ddp and zero2 with 25 MiB buckets; hsdp sharded over a node's 8 "
              "GPUs: projection-hsdp.md)", ""] + strategy_summary(projections)
    lines += ["", "Bytes each GPU sends per step (ring formulas, (p-1)/p x bytes per gather or reduce-scatter, "
              "2(p-1)/p per all-reduce), from the simulated collectives:", ""] + traffic_paragraph(projections, configs)
    lines += [""] + memory_section(raw, configs, batches, clusters_path) + ["", "## Tables", ""]
    lines += projection_tables(projections, batch, configs) + strategy_tables(projections)
    lines.append(published_comparison(projections))
    write_text(os.path.join(out, "projection.md"), "\n".join(lines))
    write_hsdp_projection(raw, configs, clusters_path, out)
    if plot:
        plot_projection(projections, os.path.join(out, "projection.png"))
        devices, reserved, fragmentation = load_devices(raw, clusters_path)
        usable = {d.name: usable_memory_bytes(d.memory_gib, reserved, fragmentation) for d in devices}
        plot_memory(batches, configs, devices, os.path.join(out, "projection-memory.png"),
                    raw["workload"]["seq_len"], batch, 64, usable, node_gpus(raw, clusters_path))
    return projections


# ----------------------------------------------------------------------------------------
# Output

def write_text(path, text):
    """Written under a temporary name, then renamed: never half a file under the final name."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    temporary = path + ".tmp"
    with open(temporary, "w", encoding="utf-8") as f:
        f.write(text.rstrip() + "\n")
    os.replace(temporary, path)


def pyplot():
    import matplotlib
    matplotlib.use("Agg")
    matplotlib.rcParams["svg.hashsalt"] = "mpibert"  # deterministic output
    import matplotlib.pyplot as plt
    return plt


def save(fig, path):
    fig.savefig(path, dpi=110, metadata={"Software": None})


MARKERS = {"ddp": "o", "zero1": "s", "zero2": "^", "fsdp": "D"}


def plot_check(rows, path):
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    pairs = [("step time per step (s)", [(r.run.step, r.predicted.step) for r in rows]),
             ("exposed communication per step (s)", [(r.exposed_measured, r.predicted.exposed) for r in rows])]
    for ax, (title, points) in zip(axes, pairs):
        shown = [(row, m, p) for row, (m, p) in zip(rows, points) if math.isfinite(m) and m > 0 and p > 0]
        for row, m, p in shown:
            ax.scatter(m, p, marker=MARKERS[row.run.strategy])
            ax.annotate(row.run.name, (m, p), fontsize=5)
        values = [v for _, m, p in shown for v in (m, p)] or [1e-3, 1.0]
        low, top = min(values) / 1.25, max(values) * 1.25
        ax.plot([low, top], [low, top], color="grey", linewidth=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(low, top)
        ax.set_ylim(low, top)
        ax.set_xlabel("measured")
        ax.set_ylabel("predicted")
        ax.set_title(title)
    fig.suptitle("mpibert CPU runs: alpha-beta model vs measurement (o ddp, s zero1, ^ zero2, D fsdp)")
    fig.tight_layout()
    save(fig, path)
    plt.close(fig)


def plot_best(axes, projections, model, column):
    """Rows 0-1: speedup and efficiency of the fastest configuration, per GPU and network."""
    series = {}
    for pr in projections:
        if pr.model == model:
            series.setdefault((pr.gpu, pr.net), []).append(pr)
    for (gpu, net), prs in sorted(series.items()):
        ps = [pr.p for pr in prs]
        eff = [pr.one_gpu / pr.best.step for pr in prs]
        style = "-" if gpu == "A100" else "--"
        axes[0][column].plot(ps, [p * e for p, e in zip(ps, eff)], style, marker=".", label=f"{gpu} {net}")
        axes[1][column].plot(ps, eff, style, marker=".", label=f"{gpu} {net}")
    axes[0][column].plot(PROJECTION_GPUS, PROJECTION_GPUS, color="grey", linewidth=0.8, label="linear")
    for row, label in enumerate(["speedup", "efficiency"]):
        axes[row][column].set_ylabel(label)
        axes[row][column].set_title(f"{model}, batch 32/GPU, fastest strategy x bucket")
    axes[0][column].set_yscale("log", base=2)


def plot_strategies(ax, projections, model, gpu):
    """Efficiency of ddp, zero1/zero2 (25 MiB buckets), fsdp and hsdp per network, on one GPU."""
    styles = {"IB100": ":", "IB200": "--", "IB400": "-"}
    colors = {"ddp": "tab:blue", "zero2": "tab:orange", "fsdp": "tab:red", "hsdp": "tab:purple"}
    labels = {"ddp": "ddp", "zero2": "zero1/zero2", "fsdp": "fsdp", "hsdp": "hsdp"}
    series = {}
    for pr in projections:
        if pr.model == model and pr.gpu == gpu:
            series.setdefault(pr.net, []).append(pr)
    for net, prs in sorted(series.items()):
        for strategy in ("ddp", "zero2", "fsdp", "hsdp"):
            ax.plot([pr.p for pr in prs], [pr.one_gpu / pr.strategies[strategy].step for pr in prs],
                    styles.get(net, "-"), color=colors[strategy], marker=".", label=f"{labels[strategy]} {net}")
    ax.set_ylabel("efficiency")
    ax.set_title(f"{model}, {gpu}: strategies (25 MiB buckets)")


def plot_projection(projections, path):
    plt = pyplot()
    models = sorted({p.model for p in projections})
    gpus = sorted({p.gpu for p in projections})
    fig, axes = plt.subplots(2 + len(gpus), len(models), figsize=(6 * len(models), 4 * (2 + len(gpus))), squeeze=False)
    for column, model in enumerate(models):
        plot_best(axes, projections, model, column)
        for row, gpu in enumerate(gpus, start=2):
            plot_strategies(axes[row][column], projections, model, gpu)
        for row in range(2 + len(gpus)):
            ax = axes[row][column]
            ax.set_xscale("log", base=2)
            ax.set_xlabel("GPUs (8 per node)")
            ax.legend(fontsize=6, ncol=2)
            if row >= 1:
                ax.set_ylim(0, 1.05)
    fig.tight_layout()
    save(fig, path)
    plt.close(fig)


def plot_largest_batches(ax, batches, model, devices, p, seq_len):
    """Grouped bars: the largest batch per GPU (bf16, p GPUs) per device and strategy."""
    column = [q for q in PROJECTION_GPUS if q >= 8].index(p)
    width = 0.8 / len(STRATEGIES)
    for k, strategy in enumerate(STRATEGIES):
        heights = [batches[(model, "bf16", d.name, strategy)][column] for d in devices]
        xs = [i + (k - (len(STRATEGIES) - 1) / 2) * width for i in range(len(devices))]
        ax.bar(xs, heights, width, label=strategy, color=f"C{k}")
    ax.set_xticks(range(len(devices)), [d.name for d in devices])
    ax.set_ylabel(f"largest batch per GPU (sequences of {seq_len})")
    ax.set_title(f"{model}, bf16, {p} GPUs: largest batch that fits")
    ax.legend(fontsize=7)


def plot_peak_parts(ax, config, model, p, batch, seq_len, usable, group):
    """Stacked bars: what the peak is made of per strategy (bf16); dashed: a device's usable memory
    where it is within the plot."""
    bottoms = [0.0] * len(STRATEGIES)
    parts = [peak_breakdown(config, s, p, batch, seq_len, "bf16", group) for s in STRATEGIES]
    for k, name in enumerate(parts[0]):
        heights = [part[name] / GIB for part in parts]
        ax.bar(STRATEGIES, heights, 0.6, bottom=bottoms, label=name, color=f"C{k + 4}")
        bottoms = [b + h for b, h in zip(bottoms, heights)]
    for device, limit in usable.items():
        if limit / GIB < 1.15 * max(bottoms):
            ax.axhline(limit / GIB, linestyle="--", color="grey", linewidth=0.8)
            ax.annotate(device, (len(STRATEGIES) - 0.5, limit / GIB), fontsize=7, ha="right", va="bottom")
    ax.set_ylim(0, 1.15 * max(bottoms))
    ax.set_ylabel("GiB at the peak")
    ax.set_title(f"{model}, bf16, batch {batch} per GPU, {p} GPUs: the peak's parts")
    ax.legend(fontsize=7)


def plot_memory(batches, configs, devices, path, seq_len, batch, p, usable, group):
    """projection-memory.png: per model, the largest batch (top) and the peak's parts (bottom)."""
    plt = pyplot()
    fig, axes = plt.subplots(2, len(configs), figsize=(6 * len(configs), 9), squeeze=False)
    for column, (model, config) in enumerate(configs.items()):
        plot_largest_batches(axes[0][column], batches, model, devices, p, seq_len)
        plot_peak_parts(axes[1][column], config, model, p, batch, seq_len, usable, group)
    fig.tight_layout()
    save(fig, path)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=["check", "project", "all"])
    parser.add_argument("--measured", default=DATA_DIR and os.path.join(DATA_DIR, "measured"),
                        help="the measured runs `check` reads (the checkout's results/scaling_model/measured)")
    parser.add_argument("--measured-bf16", default=DATA_DIR and os.path.join(DATA_DIR, "measured-bf16"),
                        help="bench/reduced_precision.sh's runs, checked where the folder exists")
    parser.add_argument("--clusters", default=os.path.join(INPUTS, "clusters.json"))
    parser.add_argument("--out", default=DATA_DIR or ".",
                        help="where the reports go (the checkout's results/scaling_model, installed the current directory)")
    parser.add_argument("--no-plot", action="store_true", help="skip the PNG files")
    args = parser.parse_args(argv)
    if args.command in ("check", "all") and not args.measured:
        parser.error("check reads measured runs: give --measured DIR (installed, the package has none of its own)")
    try:
        if args.command in ("project", "all"):
            write_projection(args.clusters, args.out, plot=not args.no_plot)
            print(f"wrote {os.path.join(args.out, 'projection.md')}")
        if args.command in ("check", "all"):
            write_check(args.measured, args.out, plot=not args.no_plot, reduced_precision=args.measured_bf16)
            print(f"wrote {os.path.join(args.out, 'check.md')}")
    except InputError as error:
        print(f"scaling-model: {error}", file=sys.stderr)
        return 1
    return 0


def cli():
    """The console script (pyproject.toml's [project.scripts])."""
    sys.exit(main())


if __name__ == "__main__":
    cli()
