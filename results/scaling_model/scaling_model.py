#!/usr/bin/python3
"""Alpha-beta scaling model of mpibert's data-parallel training step.

Usage (from anywhere; paths default to this script's directory):

    scaling_model.py check   [--measured DIR] [--out DIR] [--no-plot]
    scaling_model.py project [--clusters FILE] [--out DIR] [--no-plot]
    scaling_model.py all     [options of both]

`check` reads measured/<run>/{results.json,metrics.jsonl,link.json} and
measured/allreduce-<rate>-<p>r.txt (bench_allreduce output; <rate> is rate_mbit or
"unlimited"), fits alpha and beta of the link, predicts each run's exposed gradient
communication and step time, and writes check.md and check.png.
`project` writes projection.md and projection.png for bert-base/bert-large on A100/H100
nodes (8 GPUs each) with 100/200/400 Gbit/s InfiniBand, from clusters.json.

The step (as mpibert's src/dist/data_parallel.cpp and src/train/trainer.cpp do it):
  step = data + forward + backward + exposed gradient communication + optimizer
         (+ zero1: the parameter all-gather after the optimizer, never overlapped)
         + the per-step host all-reduce of the sample count (16 bytes).

Approximations (stated, not hidden):
  * Buckets follow mpibert's rule exactly: reverse registration order, bucket 0 holds at most
    first_bucket_mb (1 MiB), later ones bucket_mb; a bucket closes when the next parameter
    would exceed its capacity (it always takes one); fp32 bytes; the element count is rounded
    up to a multiple of the world size.
  * A parameter's gradient is ready at backward_time x (cumulative backward cost, in reverse
    registration order, up to and including it) / (total cost). Costs per token:
    Linear weight 2*numel (grad-input and grad-weight matmuls, each numel MACs);
    the attention core of a layer (QK^T and AV backward) 4*seq*H, charged to that layer's
    value.weight, the first Q/K/V gradient that needs it; an embedding table H (a scatter-add
    of one row per token; numel does not matter); biases and LayerNorm numel (elementwise,
    negligible). Kernel launch overheads and elementwise ops (GELU, softmax, dropout) are
    not charged separately: they scale the whole backward, not the shares.
  * A bucket's reduction starts at max(its ready time, end of the previous bucket's):
    one communication thread/stream, buckets launched in index order (a FIFO).
  * Exposed communication = end of the last reduction - end of backward (>= 0).
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
"""

import argparse
import json
import math
import os
import sys
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
MIB = 1024 * 1024
FIRST_BUCKET_MB = 1.0
PROJECTION_GPUS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
BUCKET_CHOICES_MB = [1, 5, 10, 25, 50, 100]
STRATEGIES = ["ddp", "zero1"]
CONFIG_KEYS = ["hidden_size", "intermediate_size", "num_hidden_layers", "vocab_size",
               "max_position_embeddings", "type_vocab_size"]


class InputError(Exception):
    """Bad input: the message names the file and the problem."""


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
# Buckets (mpibert's DataParallel::Impl::build_buckets)

@dataclass
class Bucket:
    members: list = field(default_factory=list)  # parameter indices, reverse registration order
    numel: int = 0                                # rounded up to a multiple of the world size

    @property
    def nbytes(self):
        return 4 * self.numel


def build_buckets(numels, bucket_mb, world, first_bucket_mb=FIRST_BUCKET_MB):
    buckets, filled = [], 0
    for k in reversed(range(len(numels))):
        capacity = (first_bucket_mb if len(buckets) <= 1 else bucket_mb) * MIB
        nbytes = 4 * numels[k]
        if not buckets or (buckets[-1].members and filled + nbytes > capacity):
            buckets.append(Bucket())
            filled = 0
        buckets[-1].members.append(k)
        buckets[-1].numel += numels[k]
        filled += nbytes
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
    num_params: int


@dataclass
class StepResult:
    step: float
    exposed: float           # gradient communication after backward
    gather: float            # zero1: parameter all-gather (exposed), plus the norm all-reduce
    buckets: int
    algorithms: list


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


def simulate_step(inp, buckets, ready, network):
    """Step time of one configuration; `network.cost(op, bytes, p)` -> (seconds, algorithm)."""
    p = inp.world
    grad_op = "reduce_scatter" if inp.strategy == "zero1" else "all_reduce"
    costs = [network.cost(grad_op, b.nbytes, p) for b in buckets]
    exposed = exposed_communication(ready, [c[0] for c in costs], inp.backward)
    gather = 0.0
    if inp.strategy == "zero1" and p > 1:
        # After the optimizer: norm all-reduce (float64 per parameter), then the all-gathers.
        gather = network.cost("all_reduce", 8 * inp.num_params, p)[0]
        gather += sum(network.cost("all_gather", b.nbytes, p)[0] for b in buckets)
    bookkeeping = network.cost("all_reduce", 16, p)[0]  # finish_step's sample count
    step = inp.data + inp.forward + inp.backward + exposed + inp.optimizer + gather + bookkeeping
    return StepResult(step, exposed, gather, len(buckets), [c[1] for c in costs])


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
    return Run(name=name, hosts=require(link, "hosts", link_path, int), rate_mbit=rate, bucket_mb=bucket_mb,
               strategy=strategy, world=world, steps=steps,
               buckets_measured=require(parallel, "gradient_buckets", results_path, int), config=config,
               batch=require(parameters, "batch_size", results_path, int),
               seq_len=int(link.get("seq_len", 384)),
               data=per_step["data"], forward=per_step["forward"], backward=per_step["backward"],
               optimizer=per_step["optimizer"], sync=per_step["gradient_sync"],
               exposed_transfer=parallel.get("gradient_transfer_after_backward_seconds_mean", float("nan")) / steps,
               step=require(results, "train_step_seconds", results_path) / steps)


def rate_token(rate_mbit):
    if rate_mbit is None:
        return "unlimited"
    return str(int(rate_mbit)) if float(rate_mbit).is_integer() else str(rate_mbit)


def load_measured(measured):
    if not os.path.isdir(measured):
        raise InputError(f"{measured}: no such directory (run results/scaling_model/measure.sh first)")
    runs = [load_run(os.path.join(measured, d)) for d in sorted(os.listdir(measured))
            if os.path.isdir(os.path.join(measured, d))]
    if not runs:
        raise InputError(f"{measured}: no run directories (each needs results.json and link.json)")
    fits = {}
    for run in runs:
        key = (rate_token(run.rate_mbit), run.world)
        if key not in fits:
            fits[key] = fit_link_file(os.path.join(measured, f"allreduce-{key[0]}-{key[1]}r.txt"), run.world)
    return runs, fits


def zero1_optimizer_compute(run, runs):
    """zero1's optimizer phase includes its all-gather (clip_and_step does both). Its compute is
    estimated as a matching ddp run's optimizer phase / p; without one, the measured phase is
    used as it is (then the all-gather is measured, not predicted). Returns (seconds, how)."""
    for other in runs:
        if (other.strategy == "ddp" and other.world == run.world and other.hosts == run.hosts
                and other.rate_mbit == run.rate_mbit and other.config == run.config and other.batch == run.batch):
            return other.optimizer / run.world, f"ddp run {other.name} / p"
    return None, "measured (incl. all-gather)"


@dataclass
class CheckRow:
    run: Run
    predicted: StepResult
    buckets_model: int
    optimizer_source: str
    optimizer_predicted: float  # the optimizer phase as mpibert times it (zero1: with its collectives)


def predict_run(run, runs, network):
    params = parameter_list(run.config)
    buckets = build_buckets([p.numel for p in params], run.bucket_mb, run.world)
    ready = bucket_ready_times(buckets, ready_times(backward_costs(params, run.config, run.seq_len), run.backward))
    optimizer, how = run.optimizer, "measured"
    if run.strategy == "zero1":
        compute, how = zero1_optimizer_compute(run, runs)
        optimizer = compute if compute is not None else run.optimizer
    inp = StepInput(run.data, run.forward, run.backward, optimizer, run.strategy, run.world, len(params))
    result = simulate_step(inp, buckets, ready, network)
    if run.strategy == "zero1" and how.startswith("measured"):
        result.step -= result.gather  # the measured optimizer phase already holds the all-gather
        result.gather = 0.0
    return CheckRow(run, result, len(buckets), how, optimizer + result.gather)


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
             "exposed/step meas (s) | exposed transfer meas (s) | exposed pred (s) | exposed err % | "
             "step meas (s) | step pred (s) | step err % | optimizer phase meas / pred (s) | optimizer compute from |",
             "| --- | ---: | ---: | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for row in rows:
        r, pr = row.run, row.predicted
        compute = r.data + r.forward + r.backward + r.optimizer
        lines.append(f"| {r.name} | {r.hosts} | {rate_token(r.rate_mbit)} | {r.bucket_mb:g} | {r.strategy} | "
                     f"{r.buckets_measured}/{row.buckets_model} | {compute:.3f} | {r.sync:.3f} | {fmt(r.exposed_transfer)} | "
                     f"{pr.exposed:.3f} | {fmt(percent(pr.exposed, r.sync), 0)} | {r.step:.3f} | {pr.step:.3f} | "
                     f"{fmt(percent(pr.step, r.step), 1)} | {r.optimizer:.3f} / {row.optimizer_predicted:.3f} | "
                     f"{row.optimizer_source} |")
    return lines


CHECK_NOTES = """
How to read this table:
- Per-step values are run totals / global_step (results.json `phase_seconds`, `train_step_seconds`; the
  first step is included in both, so they agree with each other).
- compute/step = data + forward + backward + optimizer phases. The phase times are each the slowest
  rank's (max over ranks per phase), so their sum can exceed the real step.
- "exposed/step meas" is the `gradient_sync` phase (the training thread waiting after backward,
  slowest rank): it includes waiting for a slower rank, which the alpha-beta model does not predict.
  "exposed transfer meas" is `gradient_transfer_after_backward_seconds_mean` / steps: the part of the
  transfers after backward, waiting for other ranks left out; it is what the model's "exposed pred" is.
- Predicted step = measured data + forward + backward + optimizer compute + predicted exposed
  communication (+ zero1: predicted norm all-reduce and parameter all-gather) + the per-step 16-byte
  sample-count all-reduce. Collective times use the alpha and beta fitted to bench_allreduce on the
  same link and rank count, per operation (table above).
- zero1: mpibert's optimizer phase contains the parameter all-gather. Its compute is taken as a
  matching ddp run's optimizer phase / p when there is one; otherwise the measured phase is used
  whole and the all-gather is not predicted ("measured (incl. all-gather)").
- err % = (predicted - measured) / measured.
- On this 2-core VM the MPI progress thread competes with compute and 3 ranks share 2 cores; the
  errors show how far a contention-free model is from that.
"""


def error_summary(rows):
    """Mean and largest |error| of the step and of the exposed communication, over all runs and
    per host count: what the closing table quotes."""
    def line(label, subset):
        step = [(abs(percent(r.predicted.step, r.run.step)), r.run.name) for r in subset]
        transfer = [abs(percent(r.predicted.exposed, r.run.exposed_transfer)) for r in subset
                    if math.isfinite(r.run.exposed_transfer) and r.run.exposed_transfer > 0]
        worst = max(step)
        return (f"| {label} | {len(subset)} | {sum(e for e, _ in step) / len(step):.1f} | {worst[0]:.1f} ({worst[1]}) | "
                f"{sum(transfer) / len(transfer):.1f} | {max(transfer):.1f} |") if transfer else ""
    lines = ["| runs | count | step: mean abs. error % | step: largest abs. error % (run) | "
             "exposed transfer: mean abs. error % | largest % |",
             "| --- | ---: | ---: | --- | ---: | ---: |", line("all", rows)]
    for hosts in sorted({r.run.hosts for r in rows}):
        lines.append(line(f"{hosts} hosts", [r for r in rows if r.run.hosts == hosts]))
    return [l for l in lines if l]


def write_check(measured, out, plot=True):
    runs, fits = load_measured(measured)
    rows = [predict_run(run, runs, FittedNetwork(fits[(rate_token(run.rate_mbit), run.world)])) for run in runs]
    lines = ["# Scaling model check: predicted vs measured (CPU, mpibert over MPI)", "",
             "Generated by `scaling_model.py check` from `measured/`.", "", "## Link fits (bench_allreduce)", ""]
    lines += fit_table(fits, runs)
    lines += ["", "## Step time and exposed communication", ""] + check_table(rows) + [CHECK_NOTES.rstrip(), ""]
    lines += ["## Errors", ""] + error_summary(rows) + [""]
    mismatched = [r.run.name for r in rows if r.run.buckets_measured != r.buckets_model]
    if mismatched:
        lines += [f"**Bucket count differs from mpibert's in: {', '.join(mismatched)}** (the model's bucket rule is wrong there).", ""]
    write_text(os.path.join(out, "check.md"), "\n".join(lines))
    if plot:
        plot_check(rows, os.path.join(out, "check.png"))
    return rows


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
    return raw


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


def gpu_compute(raw, gpu, config, base_config, path):
    """One GPU's step at the workload's batch: bert-base from the reference throughput; the
    optimizer from HBM bandwidth; bert-large scaled by the parameter (6*params*tokens) ratio."""
    g, opt, split = raw["gpus"][gpu], raw["optimizer"], raw["compute_split"]
    batch = raw["workload"]["batch_per_gpu"]
    step_base = batch / value(g["step_samples_per_s"], path, "step_samples_per_s")
    bytes_per_param = value(opt["bytes_per_param"], path, "bytes_per_param")
    bandwidth = value(g["hbm_GBps"], path, "hbm_GBps") * 1e9 * value(opt["hbm_efficiency"], path, "hbm_efficiency")
    base_params, params = total_params(base_config), total_params(config)
    optimizer_base = base_params * bytes_per_param / bandwidth
    data = value(split["data_seconds"], path, "data_seconds")
    fwd_bwd = (step_base - optimizer_base - data) * params / base_params
    forward = fwd_bwd * value(split["forward_fraction"], path, "forward_fraction")
    return Compute(forward, fwd_bwd - forward, params * bytes_per_param / bandwidth, data)


def project_point(config, compute, cluster, p, strategy, bucket_mb, seq_len):
    params = parameter_list(config)
    buckets = build_buckets([q.numel for q in params], bucket_mb, p)
    ready = bucket_ready_times(buckets, ready_times(backward_costs(params, config, seq_len), compute.backward))
    optimizer = compute.optimizer / p if strategy == "zero1" else compute.optimizer
    inp = StepInput(compute.data, compute.forward, compute.backward, optimizer, strategy, p, len(params))
    return simulate_step(inp, buckets, ready, cluster)


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


def run_projections(raw, configs, path):
    batch, seq_len = raw["workload"]["batch_per_gpu"], raw["workload"]["seq_len"]
    out = []
    for model, config in configs.items():
        for gpu in raw["gpus"]:
            compute = gpu_compute(raw, gpu, config, configs["bert-base"], path)
            for net in raw["networks"]:
                cluster = make_cluster(raw, gpu, net, path)
                one = project_point(config, compute, cluster, 1, "ddp", 25, seq_len).step
                for p in PROJECTION_GPUS:
                    default = project_point(config, compute, cluster, p, "ddp", 25, seq_len)
                    options = [(project_point(config, compute, cluster, p, s, mb, seq_len), f"{s} {mb} MiB")
                               for s in STRATEGIES for mb in BUCKET_CHOICES_MB]
                    best, label = min(options, key=lambda o: (round(o[0].step, 12), o[1]))
                    if p == 1:
                        label = "(no communication)"
                    out.append(Projection(model, gpu, net, p, default, best, label, one))
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


PROJECTION_NOTES = """## What the projection assumes

- One GPU's step at batch 32, sequence 384: bert-base from the reference throughput (A100: HF Trainer
  275 samples/s, A100-PCIe, the issue's figure, assumed to hold at batch 32; H100: HF Trainer bf16 batch
  32 padded, 569-612 samples/s measured on this project's H100, midpoint 590). The optimizer (AdamW,
  32 bytes of HBM traffic per parameter at 70% of peak HBM bandwidth) is taken out of it; the rest is
  forward (1/3) + backward (2/3). bert-large = bert-base x params ratio (6*params*tokens FLOPs).
  The plain PyTorch loop on the H100 (729 samples/s) would make compute 19% shorter and scaling a
  little worse.
- Gradients in fp32 (4 bytes per parameter), bucketed as mpibert does; ready times from the FLOP share
  of each parameter's backward; buckets reduced one at a time in order (NCCL stream).
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
- Not modelled: NCCL protocols (LL/LL128), NVLS/SHARP, contention of NCCL kernels with compute, stragglers,
  data loading, the evaluation phase, and mpibert's GPU path (which has not yet run on a GPU).
"""


def write_projection(clusters_path, out, plot=True):
    raw = load_clusters(clusters_path)
    configs = {"bert-base": load_config(os.path.join(HERE, "..", "..", "bench", "bert-base-config.json")),
               "bert-large": load_config(os.path.join(HERE, "bert-large-config.json"))}
    projections, batch = run_projections(raw, configs, clusters_path)
    lines = ["# Scaling projection: mpibert data-parallel BERT on GPU clusters", "",
             "Generated by `scaling_model.py project` from `clusters.json` (every input there has its source).",
             f"Batch {batch} per GPU, sequences of {raw['workload']['seq_len']}; p = GPUs, 8 per node; "
             "efficiency = one GPU's step / p GPUs' step (weak scaling).", "",
             f"Parameters: bert-base {total_params(configs['bert-base']):,}, bert-large {total_params(configs['bert-large']):,} "
             "(BertForQuestionAnswering, no pooler).", "",
             "## Recommended configuration (fastest of ddp/zero1 x buckets 1, 5, 10, 25, 50, 100 MiB)", ""]
    lines += recommendations(projections) + ["", PROJECTION_NOTES, "## Tables", ""]
    lines += projection_tables(projections, batch, configs)
    lines.append(published_comparison(projections))
    write_text(os.path.join(out, "projection.md"), "\n".join(lines))
    if plot:
        plot_projection(projections, os.path.join(out, "projection.png"))
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


def plot_check(rows, path):
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    pairs = [("step time per step (s)", [(r.run.step, r.predicted.step) for r in rows]),
             ("exposed communication per step (s)", [(r.run.sync, r.predicted.exposed) for r in rows])]
    for ax, (title, points) in zip(axes, pairs):
        for row, (m, p) in zip(rows, points):
            ax.scatter(m, p, marker="o" if row.run.strategy == "ddp" else "s")
            ax.annotate(row.run.name, (m, p), fontsize=6)
        top = max([max(m, p) for m, p in points] + [1e-6]) * 1.1
        ax.plot([0, top], [0, top], color="grey", linewidth=0.8)
        ax.set_xlim(0, top)
        ax.set_ylim(0, top)
        ax.set_xlabel("measured")
        ax.set_ylabel("predicted")
        ax.set_title(title)
    fig.suptitle("mpibert CPU runs: alpha-beta model vs measurement (o ddp, s zero1)")
    fig.tight_layout()
    save(fig, path)
    plt.close(fig)


def plot_projection(projections, path):
    plt = pyplot()
    models = sorted({p.model for p in projections})
    fig, axes = plt.subplots(2, len(models), figsize=(6 * len(models), 8), squeeze=False)
    series = {}
    for pr in projections:
        series.setdefault((pr.model, pr.gpu, pr.net), []).append(pr)
    for column, model in enumerate(models):
        for (m, gpu, net), prs in sorted(series.items()):
            if m != model:
                continue
            ps = [pr.p for pr in prs]
            eff = [pr.one_gpu / pr.best.step for pr in prs]
            style = "-" if gpu == "A100" else "--"
            axes[0][column].plot(ps, [p * e for p, e in zip(ps, eff)], style, marker=".", label=f"{gpu} {net}")
            axes[1][column].plot(ps, eff, style, marker=".", label=f"{gpu} {net}")
        axes[0][column].plot(PROJECTION_GPUS, PROJECTION_GPUS, color="grey", linewidth=0.8, label="linear")
        for row, label in enumerate(["speedup", "efficiency"]):
            ax = axes[row][column]
            ax.set_xscale("log", base=2)
            ax.set_xlabel("GPUs (8 per node)")
            ax.set_ylabel(label)
            ax.set_title(f"{model}, batch 32/GPU, fastest ddp/zero1 x bucket")
            ax.legend(fontsize=7)
        axes[0][column].set_yscale("log", base=2)
        axes[1][column].set_ylim(0, 1.05)
    fig.tight_layout()
    save(fig, path)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=["check", "project", "all"])
    parser.add_argument("--measured", default=os.path.join(HERE, "measured"))
    parser.add_argument("--clusters", default=os.path.join(HERE, "clusters.json"))
    parser.add_argument("--out", default=HERE)
    parser.add_argument("--no-plot", action="store_true", help="skip the PNG files")
    args = parser.parse_args(argv)
    try:
        if args.command in ("project", "all"):
            write_projection(args.clusters, args.out, plot=not args.no_plot)
            print(f"wrote {os.path.join(args.out, 'projection.md')}")
        if args.command in ("check", "all"):
            write_check(args.measured, args.out, plot=not args.no_plot)
            print(f"wrote {os.path.join(args.out, 'check.md')}")
    except InputError as error:
        print(f"scaling_model.py: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
