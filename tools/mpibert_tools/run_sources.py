"""Run directories of three kinds, read into one record for tools/compare.

- mpibert: what `mpibert train --output-dir RUN` writes (results.json, metrics.jsonl).
- HF Trainer: an output_dir of transformers' Trainer as run_qa.py leaves it (all_results.json,
  train_results.json, eval_results.json, trainer_state.json with its log_history).
- Lightning: a CSVLogger folder (metrics.csv, hparams.yaml), or the folder holding its version_N.

Each reader fills the figures its source records and names, in `lacking`, each figure it does
not, with the reason; nothing is estimated. Standard library only, plus PyYAML for hparams.yaml.
"""

import csv
import json
import math
import os
import re

SOURCES = ("mpibert", "HF Trainer", "Lightning")


class RunError(Exception):
    pass


def num(value):
    """value as a finite float, or None (missing, null, not a number, NaN); numeric strings too."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return None
    if isinstance(value, (int, float)):
        value = float(value)
        return value if math.isfinite(value) else None
    return None


def read_json(path, what):
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except (ValueError, UnicodeDecodeError) as e:
        raise RunError("%s is malformed: %s" % (path, e))
    except OSError as e:
        raise RunError("cannot read %s: %s" % (path, e))
    if not isinstance(value, dict):
        raise RunError("%s is malformed: expected a JSON object (%s), found %s" % (path, what, type(value).__name__))
    return value


class Run:
    """One run's figures, whatever wrote it. None where the source has no such figure."""

    def __init__(self, path, order, source):
        self.path, self.order, self.source = path, order, source
        self.dir = os.path.abspath(path)
        self.name = os.path.basename(os.path.normpath(self.dir))
        self.label = self.name
        self.ranks = self.strategy = self.communication = None
        self.model = None  # HF's architecture ("DistilBertForQuestionAnswering"), where the run records it
        self.device_text = None
        self.device_kind = None  # ("cpu" or "gpu", the model or None), where the source records it
        self.padding = None  # mpibert's --padding (full, dynamic, packed), where the source records it
        self.runtime = None              # train_runtime: from the first step, evaluations during training included
        self.step_samples_per_second = None  # over the training steps alone
        self.steady_samples_per_second = None  # over the steps after the warm-up (steady_after)
        self.steady_after = None  # the warm-up steps left out of it
        self.runtime_samples_per_second = None  # over train_runtime (HF's train_samples_per_second)
        self.epoch = self.global_step = None
        self.em = self.f1 = self.eval_loss = None
        self.global_batch = None
        self.train_points, self.eval_points = {}, {}  # {step: loss}
        self.eval_epochs = {}  # {step: epochs done at that evaluation}, where the source records it
        self.memory = None  # MemoryPerRank, where the source records it
        self.mfu = None  # model FLOPs utilization, a fraction, where the source records it
        self.phases = {}
        self.lacking = []  # (figure, why)
        self.notes = []
        self.speedup = self.efficiency = None
        self.speedup_basis = None  # "steps" or "runtime"

    def lack(self, figure, why):
        self.lacking.append((figure, why))

    @property
    def samples_per_second(self):
        """For the plots: over the steps where recorded, else over train_runtime."""
        if self.step_samples_per_second is not None:
            return self.step_samples_per_second
        return self.runtime_samples_per_second

    def throughput(self, basis):
        return self.step_samples_per_second if basis == "steps" else self.runtime_samples_per_second

    def set_ranks(self, ranks):
        self.ranks = ranks
        if ranks == 1:
            self.strategy = "single"

    def device(self):
        return self.device_text

    def differs_in_device(self, other):
        """Why a speedup between this run and `other` would compare devices, or None: both record
        their kind of device and it differs (CPU and GPU, or two models of either)."""
        mine, theirs = self.device_kind, other.device_kind
        if mine is None or theirs is None:
            return None
        if mine[0] == theirs[0] and (mine[1] is None or theirs[1] is None or mine[1] == theirs[1]):
            return None
        return "it ran on %s, `%s` on %s" % (describe_kind(mine), other.label, describe_kind(theirs))

    def group(self):
        """The series a run belongs to in the scaling plot: its strategy (and transport)."""
        if self.strategy in (None, "single"):
            return self.strategy or "unknown"
        if self.communication and self.communication not in ("none",):
            return "%s (%s)" % (self.strategy, self.communication)
        return self.strategy


def describe_kind(kind):
    return kind[0] if kind[1] is None else "%s (%s)" % kind


# --- mpibert ------------------------------------------------------------------------------------

def mpibert_device_kind(env):
    """("gpu", model) or ("cpu", model) from results.json's environment; None where not recorded."""
    devices = env.get("devices")
    cpu_model = env.get("cpu_model") if isinstance(env.get("cpu_model"), str) and env.get("cpu_model") else None
    if isinstance(devices, dict):
        if devices.get("type") == "cuda":
            name = devices.get("name")
            return ("gpu", name if isinstance(name, str) and name else None)
        if devices.get("type") == "cpu":
            return ("cpu", cpu_model)
        return None
    if isinstance(devices, str) and devices:  # older runs: "cpu", "cuda", "cuda:0"...
        return ("gpu", None) if devices.startswith("cuda") else ("cpu", cpu_model) if devices == "cpu" else None
    return None


def mpibert_device(env):
    devices = env.get("devices")
    if isinstance(devices, dict):  # {"type", "name", "count", ...}
        name = devices.get("name") or devices.get("type")
        count = devices.get("count") or 1
        text = ("%d× %s" % (count, name) if count > 1 else name) if devices.get("type") == "cuda" else "cpu"
    else:  # older runs: a string
        text = devices if isinstance(devices, str) and devices else None
    cpu_model = env.get("cpu_model")
    if text == "cpu" and isinstance(cpu_model, str) and cpu_model:
        text = "cpu (%s)" % cpu_model
    host = env.get("host")
    if isinstance(host, str) and host:
        text = "%s @ %s" % (text, host) if text else host
    return text


def read_jsonl_points(run, path):
    """Train and eval points from mpibert's metrics.jsonl: {step: loss}; after a resume the last wins."""
    if not os.path.isfile(path):
        return
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.readlines()
    except (OSError, UnicodeDecodeError) as e:
        run.notes.append("cannot read metrics.jsonl: %s" % e)
        return
    bad = 0
    for line in lines:
        line = line.strip()
        if not line:
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            bad += 1  # e.g. a line cut short by a preempted job
            continue
        if not isinstance(rec, dict):
            bad += 1
            continue
        step = num(rec.get("step"))
        if step is None:
            continue
        if "eval_loss" in rec or "eval_f1" in rec:
            loss = num(rec.get("eval_loss"))
            if loss is not None:
                run.eval_points[step] = loss
            epoch = num(rec.get("epoch"))  # runs before 2026-11-25 did not write it
            if epoch is not None:
                run.eval_epochs[step] = epoch
        else:
            loss = num(rec.get("loss"))
            if loss is not None:
                run.train_points[step] = loss
    if bad:
        run.notes.append("skipped %d malformed line(s) of metrics.jsonl" % bad)


def architecture_of(config):
    """HF's architecture named by a config.json (or results.json's parameters.model): its first
    "architectures" entry, else its model_type; None when it names neither."""
    if not isinstance(config, dict):
        return None
    names = config.get("architectures")
    if isinstance(names, list) and names and isinstance(names[0], str):
        return names[0]
    model_type = config.get("model_type")
    return model_type if isinstance(model_type, str) and model_type else None


def read_mpibert(path, order):
    r = read_json(os.path.join(path, "results.json"), "results.json")
    peer = isinstance(r.get("parallel"), dict) and r["parallel"].get("strategy") == "hf-trainer"
    run = Run(path, order, "HF Trainer (peer)" if peer else "mpibert")
    parallel = r.get("parallel") if isinstance(r.get("parallel"), dict) else {}
    env = r.get("environment") if isinstance(r.get("environment"), dict) else {}
    params = r.get("parameters") if isinstance(r.get("parameters"), dict) else {}
    phases = r.get("phase_seconds")
    run.phases = phases if isinstance(phases, dict) else {}
    ranks = num(parallel.get("world_size"))
    if ranks is None:
        ranks = num(env.get("world_size"))
    strategy = parallel.get("strategy")
    run.strategy = strategy if isinstance(strategy, str) and strategy else None
    if ranks is not None:
        run.set_ranks(int(ranks))
    comm = parallel.get("communication", env.get("communication"))
    run.communication = comm if isinstance(comm, str) and comm else None
    run.device_text = mpibert_device(env)
    run.device_kind = mpibert_device_kind(env)
    padding = params.get("padding")
    run.padding = padding if isinstance(padding, str) and padding else None
    if run.padding is None:
        run.lack("padding", "results.json's parameters have no padding")
    run.runtime = num(r.get("train_runtime"))
    run.step_samples_per_second = num(r.get("train_step_samples_per_second"))
    run.runtime_samples_per_second = num(r.get("train_samples_per_second"))
    if run.step_samples_per_second is None:
        run.lack("samples/s over the steps", "results.json predates train_step_samples_per_second")
    steady, after = num(r.get("train_steady_samples_per_second")), num(r.get("steady_after_steps"))
    if steady is None:
        run.lack("steady samples/s", "results.json predates train_steady_samples_per_second (written since 2026-11-26)")
    elif steady <= 0:  # mpibert writes 0 where no step came after the warm-up
        run.lack("steady samples/s", "no step after the first %d, the warm-up it leaves out" % (after or 0))
    else:
        run.steady_samples_per_second, run.steady_after = steady, int(after) if after is not None else None
    run.epoch = num(r.get("epoch"))
    if run.epoch is None:
        run.epoch = num(params.get("epochs"))
    run.global_step = num(r.get("global_step"))
    run.em = num(r.get("eval_exact_match"))  # SQuAD v1.1
    if run.em is None:
        run.em = num(r.get("eval_exact"))  # SQuAD v2.0
    run.f1 = num(r.get("eval_f1"))
    run.eval_loss = num(r.get("eval_loss"))
    run.global_batch = num(params.get("global_batch_size"))
    architecture = r.get("architecture")
    run.model = architecture if isinstance(architecture, str) and architecture else architecture_of(params.get("model"))
    run.memory = memory_per_rank(parallel.get("memory_per_rank"))
    if run.memory is None:
        run.lack("memory per rank", "results.json has no parallel.memory_per_rank (written since 2026-11-25)")
    run.mfu = utilization_mfu(r.get("utilization"))
    if run.mfu is None:
        run.lack("MFU", "results.json has no utilization with a measured matrix-product rate (written since 2026-11-25)")
    read_jsonl_points(run, os.path.join(path, "metrics.jsonl"))
    return run


MEMORY_KINDS = ("parameter_bytes", "gradient_bytes", "optimizer_state_bytes")
PEAK_KINDS = (("peak_gpu_allocated_bytes", "GPU"), ("peak_rss_bytes", "RSS"))


class MemoryPerRank:
    """mpibert's parallel.memory_per_rank: bytes held between steps by kind (of the rank that holds
    the most), and the largest peak over the ranks (peak_kind: "RSS" on a CPU, "GPU" allocated)."""

    def __init__(self, held, peak, peak_kind, ranks):
        self.held, self.peak, self.peak_kind, self.ranks = held, peak, peak_kind, ranks

    @property
    def held_total(self):
        return sum(self.held.values())


def memory_per_rank(entries):
    """MemoryPerRank from results.json's list (one object per rank), or None where absent or unreadable."""
    if not isinstance(entries, list) or not entries or not all(isinstance(e, dict) for e in entries):
        return None
    helds = []
    for entry in entries:
        held = {kind: num(entry.get(kind)) for kind in MEMORY_KINDS}
        if any(v is None for v in held.values()):
            return None
        helds.append(held)
    peak, peak_kind = None, None
    for key, kind in PEAK_KINDS:
        values = [num(e.get(key)) for e in entries]
        if all(v is not None for v in values):
            peak, peak_kind = max(values), kind
            break
    return MemoryPerRank(max(helds, key=lambda h: sum(h.values())), peak, peak_kind, len(entries))


def utilization_mfu(utilization):
    """results.json's utilization.mfu (model FLOP/s on real tokens over the matrix-product rate the
    ranks measured at setup), or None where absent, unreadable or without a measured rate."""
    if not isinstance(utilization, dict):
        return None
    rate = num(utilization.get("matmul_flops_per_second"))
    if rate is None or rate <= 0:  # mpibert writes mfu 0 where no rate was measured
        return None
    return num(utilization.get("mfu"))


# --- HF Trainer ---------------------------------------------------------------------------------

HF_RESULT_FILES = ("all_results.json", "train_results.json", "eval_results.json")


def is_hf_trainer_dir(path):
    return any(os.path.isfile(os.path.join(path, f)) for f in HF_RESULT_FILES + ("trainer_state.json",))


def read_hf_trainer(path, order):
    run = Run(path, order, "HF Trainer")
    metrics = {}
    for name in HF_RESULT_FILES:
        file = os.path.join(path, name)
        if os.path.isfile(file):
            for key, value in read_json(file, name).items():
                metrics.setdefault(key, value)
    state_path = os.path.join(path, "trainer_state.json")
    state = read_json(state_path, "trainer_state.json") if os.path.isfile(state_path) else {}
    config_path = os.path.join(path, "config.json")  # save_model's, beside the results
    if os.path.isfile(config_path):
        run.model = architecture_of(read_json(config_path, "config.json"))
    history = state.get("log_history") if isinstance(state.get("log_history"), list) else []
    for entry in history:
        if not isinstance(entry, dict):
            continue
        step = num(entry.get("step"))
        if step is not None and num(entry.get("loss")) is not None:
            run.train_points[step] = num(entry["loss"])
        if step is not None and num(entry.get("eval_loss")) is not None:
            run.eval_points[step] = num(entry["eval_loss"])
            if num(entry.get("epoch")) is not None:
                run.eval_epochs[step] = num(entry["epoch"])
        for key, value in entry.items():  # the summary and evaluations, when no *_results.json has them
            if key.startswith(("train_", "eval_")):
                metrics.setdefault(key, value)
    if not metrics and not history:
        raise RunError("%s: no figures in its HF files (all_results.json, trainer_state.json are empty)" % path)

    run.runtime = num(metrics.get("train_runtime"))
    run.runtime_samples_per_second = num(metrics.get("train_samples_per_second"))
    run.lack("samples/s over the steps", "HF's Trainer times only its training loop as a whole; its "
             "train_samples_per_second (shown as samples/s incl. setup) counts the first steps' warm-up and "
             "any evaluation and checkpoint during training")
    run.lack("steady samples/s", "HF's Trainer times no step apart")
    run.lack("padding", "not in HF's output files (run_qa pads to max_seq_length unless --pad_to_max_length False)")
    run.epoch = num(metrics.get("epoch"))
    if run.epoch is None:
        run.epoch = num(state.get("epoch"))
    run.global_step = num(state.get("global_step"))
    run.em = num(metrics.get("eval_exact_match"))
    if run.em is None:
        run.em = num(metrics.get("eval_exact"))
    run.f1 = num(metrics.get("eval_f1"))
    run.eval_loss = num(metrics.get("eval_loss"))
    if run.eval_loss is None and run.f1 is not None:
        run.lack("validation loss", "no eval_loss in its metrics (run_qa's evaluation computes none: its "
                 "validation features carry no labels)")
    run.lack("ranks", "HF's output files do not record the number of processes: give --ranks %s=N" % run.name)
    run.lack("device", "not in HF's output files")
    run.lack("time per phase", "not in HF's output files")
    run.lack("memory per rank", "HF's output files record none per rank (with skip_memory_metrics=False its "
             "*_mem_*_delta figures are one process's changes per stage, not a peak)")
    run.lack("MFU", "HF's output files count FLOPs (total_flos) but record no rate of the device to set them against")
    per_device = num(state.get("train_batch_size"))
    if per_device is not None:
        run.notes.append("per-device batch %d (trainer_state.json)" % per_device)
    return run


# --- Lightning ----------------------------------------------------------------------------------

# Column names by what they mean: Lightning logs whatever names the user's module chose. The
# first present wins. ThroughputMonitor's names use "/" (its default separator).
LIGHTNING_COLUMNS = {
    "train_loss": ("train_loss", "train_loss_step", "train/loss", "loss"),
    "eval_loss": ("val_loss", "val/loss", "eval_loss", "validation_loss", "val_loss_epoch"),
    "em": ("val_exact_match", "val/exact_match", "eval_exact_match", "exact_match", "val_em", "val_exact", "exact"),
    "f1": ("val_f1", "val/f1", "eval_f1", "f1"),
    "time": ("train/time", "train_time", "time"),
    "samples": ("train/samples", "train_samples"),
}


def lightning_version_dir(path):
    """The folder holding metrics.csv: PATH itself, or its newest version_N."""
    if os.path.isfile(os.path.join(path, "metrics.csv")):
        return path, None
    versions = []
    for entry in os.listdir(path) if os.path.isdir(path) else []:
        match = re.fullmatch(r"version_(\d+)", entry)
        if match and os.path.isfile(os.path.join(path, entry, "metrics.csv")):
            versions.append((int(match.group(1)), entry))
    if not versions:
        return None, None
    newest = max(versions)[1]
    return os.path.join(path, newest), (newest if len(versions) > 1 else None)


def read_hparams(path):
    file = os.path.join(path, "hparams.yaml")
    if not os.path.isfile(file):
        return {}
    try:
        import yaml
    except ImportError:
        raise RunError("%s: reading it needs PyYAML (pip install ./tools brings it)" % file)

    class Loader(yaml.SafeLoader):  # Lightning may dump Python objects: read their tags as plain values
        pass

    Loader.add_multi_constructor("", lambda loader, suffix, node: None)
    try:
        with open(file, encoding="utf-8") as f:
            value = yaml.load(f, Loader=Loader)
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise RunError("%s is malformed: %s" % (file, e))
    return value if isinstance(value, dict) else {}


def column(present, meaning):
    """The first of the meaning's names among the columns that hold a value."""
    return next((n for n in LIGHTNING_COLUMNS[meaning] if n in present), None)


def last_value(rows, name):
    for row in reversed(rows):
        value = num(row.get(name))
        if value is not None:
            return value
    return None


def read_lightning(path, order, folder, chosen):
    """PATH's log in FOLDER (lightning_version_dir's), CHOSEN the version taken among several."""
    run = Run(path, order, "Lightning")
    if chosen:
        run.notes.append("read %s, the newest of its versions" % chosen)
    file = os.path.join(folder, "metrics.csv")
    try:
        with open(file, encoding="utf-8", newline="") as f:
            rows = [{k: v for k, v in row.items() if v not in ("", None)} for row in csv.DictReader(f)]
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise RunError("cannot read %s: %s" % (file, e))
    if not rows:
        raise RunError("%s: no rows" % file)
    hparams = read_hparams(folder)

    present = set().union(*(r.keys() for r in rows))
    names = {meaning: column(present, meaning) for meaning in LIGHTNING_COLUMNS}
    for row in rows:
        step = num(row.get("step"))
        if step is None:
            continue
        for meaning, points in (("train_loss", run.train_points), ("eval_loss", run.eval_points)):
            value = num(row.get(names[meaning])) if names[meaning] else None
            if value is not None:
                points[step] = value
    run.eval_loss = last_value(rows, names["eval_loss"]) if names["eval_loss"] else None
    run.em = last_value(rows, names["em"]) if names["em"] else None
    run.f1 = last_value(rows, names["f1"]) if names["f1"] else None
    for meaning, figure in (("eval_loss", "validation loss"), ("em", "EM"), ("f1", "F1")):
        if not names[meaning]:
            run.lack(figure, "metrics.csv has none of the columns %s" % ", ".join(LIGHTNING_COLUMNS[meaning]))

    seconds = last_value(rows, names["time"]) if names["time"] else None
    samples = last_value(rows, names["samples"]) if names["samples"] else None
    run.runtime = seconds
    if seconds and samples is not None:
        run.step_samples_per_second = samples / seconds
        run.notes.append("samples/s = %s / %s (ThroughputMonitor: the training loop's time, validation excluded)"
                         % (names["samples"], names["time"]))
    else:
        run.lack("training time and samples/s", "metrics.csv has no time or sample count (log them, for "
                 "example with Lightning's ThroughputMonitor: train/time, train/samples)")
    run.lack("samples/s incl. setup", "Lightning records no time for fit() as a whole")
    training_rows = [r for r in rows if names["train_loss"] and num(r.get(names["train_loss"])) is not None]
    steps = [num(r.get("step")) for r in training_rows if num(r.get("step")) is not None]
    run.global_step = max(steps) + 1 if steps else None  # Lightning's step column counts from 0
    epochs = [num(r.get("epoch")) for r in training_rows if num(r.get("epoch")) is not None]
    run.lack("epochs", "Lightning logs the epoch index, not a fraction%s"
             % (" (the last: %d)" % max(epochs) if epochs else ""))
    world = num(hparams.get("world_size"))
    devices, nodes = num(hparams.get("devices")), num(hparams.get("num_nodes"))
    if world is None and devices is not None:
        world = devices * (nodes if nodes is not None else 1)
    if world is not None:
        run.set_ranks(int(world))
    else:
        run.lack("ranks", "hparams.yaml has no world_size or devices (or give --ranks %s=N)" % run.name)
    strategy = hparams.get("strategy")
    if isinstance(strategy, str) and strategy and run.strategy != "single":
        run.strategy = strategy
    accelerator = hparams.get("accelerator")
    run.device_text = accelerator if isinstance(accelerator, str) and accelerator else None
    if run.device_text in ("cpu",):
        run.device_kind = ("cpu", None)
    elif run.device_text in ("gpu", "cuda"):
        run.device_kind = ("gpu", None)
    run.lack("steady samples/s", "ThroughputMonitor's counters cover the training loop from its first step")
    run.lack("padding", "not in Lightning's CSV log")
    if run.device_text is None:
        run.lack("device", "hparams.yaml has no accelerator")
    batch = num(hparams.get("batch_size"))
    if batch is not None and run.ranks:
        run.global_batch = batch * run.ranks * (num(hparams.get("accumulate_grad_batches")) or 1)
    run.lack("time per phase", "not in Lightning's CSV log")
    run.lack("memory per rank", "not in Lightning's CSV log")
    run.lack("MFU", "not in Lightning's CSV log")
    return run


# --- any of them ----------------------------------------------------------------------------------

def read_run(path, order):
    """The run in PATH, whichever source wrote it; RunError names the path and the problem."""
    if not os.path.isdir(path):
        raise RunError("%s: not a run directory (it does not exist or is not a directory)" % path)
    if os.path.isfile(os.path.join(path, "results.json")):
        return read_mpibert(path, order)
    if is_hf_trainer_dir(path):
        return read_hf_trainer(path, order)
    folder, chosen = lightning_version_dir(path)
    if folder:
        return read_lightning(path, order, folder, chosen)
    raise RunError("%s: results.json is missing (expected %s from `mpibert train --output-dir %s`), and it is "
                   "neither an HF Trainer output_dir (all_results.json, trainer_state.json) nor a Lightning "
                   "CSV log (metrics.csv)" % (path, os.path.join(path, "results.json"), path))
