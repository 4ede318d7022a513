"""Compare training runs: a Markdown table on stdout, plots and comparison.md in --out.

    tools/compare RUN_DIR... [--baseline RUN_DIR] [--ranks RUN_DIR=N] [--strategy RUN_DIR=NAME]
                    [--out DIR] [--title T]

A RUN_DIR is any of (run_sources.py reads them):
- an mpibert run: what `mpibert train --output-dir RUN_DIR` wrote (results.json, metrics.jsonl);
- an HF Trainer output_dir as run_qa.py leaves it (all_results.json / train_results.json /
  eval_results.json, trainer_state.json with its log history);
- a Lightning CSVLogger folder (metrics.csv + hparams.yaml), or the folder of its version_N.
The model column is the architecture a run trained (mpibert's results.json, an HF output_dir's
config.json). A figure a source does not record is shown as a dash and listed under "Not recorded" with the
reason; none is estimated. --ranks and --strategy state what a source leaves out (HF's files do not
record the number of processes).

Three throughputs: samples/s over the training steps alone (mpibert's train_step_samples_per_second;
Lightning's ThroughputMonitor), steady samples/s over the steps after the first ones' warm-up
(mpibert's train_steady_samples_per_second, after steady_after_steps) and samples/s incl. setup (train_samples_per_second over
train_runtime, as HF reports it: from the first step, so the first steps' warm-up, and evaluations
and checkpoints during training, count). Speedup is a
run's throughput divided by the baseline's, over the steps where both have that figure and over
train_runtime otherwise (marked); parallel efficiency is the speedup divided by the ratio of rank
counts. The baseline is --baseline, or else the run with the fewest ranks (the first given among
equals). No speedup is computed between runs that record different kinds of device (CPU and
GPU, or two GPU or CPU models): a note says so. The device and mpibert's --padding (full,
dynamic, packed: what a sample costs) are columns of their own.

Memory per rank (mpibert's results.json: parallel.memory_per_rank): bytes of parameters, gradients
and optimizer state held between steps, and the peak (RSS on a CPU, allocated on a GPU).

MFU (mpibert's results.json: utilization.mfu): model FLOPs on real tokens (not padding) per second
over the training steps, divided by the matrix-product rate the run's ranks measured at setup in the
run's precision (float32 or bf16), summed over the ranks.

Writes loss.png, scaling.png, phases.png, memory.png and comparison.md into --out (default: the current
directory). Needs matplotlib and PyYAML (tools/pyproject.toml), standard library otherwise.
"""

import argparse
import math
import os
import sys

from .run_sources import RunError, num, read_run

DASH = "\u2013"  # what a missing value prints as
PHASES = [("data", "data"), ("forward", "forward"), ("backward", "backward"),
          ("gradient_sync", "gradient sync"), ("optimizer", "optimizer"), ("eval", "eval")]
PROG = "compare"


# ---------------------------------------------------------------------------------------------
# Table


def fmt_duration(seconds):
    if seconds is None:
        return DASH
    total = int(round(seconds))
    h, rem = divmod(total, 3600)
    m, s = divmod(rem, 60)
    return "%d:%02d:%02d (%s s)" % (h, m, s, fmt_num(seconds, 1))


def fmt_num(value, digits):
    if value is None:
        return DASH
    return "{:,.{}f}".format(value, digits)


def fmt_pct(value):
    return DASH if value is None else "%.0f%%" % (100.0 * value)


def md_escape(text):
    return DASH if text is None else str(text).replace("|", "\\|").replace("\n", " ")


HEADER = ["run", "source", "model", "device", "padding", "strategy", "ranks", "epochs", "training time", "samples/s",
          "steady samples/s", "samples/s incl. setup", "MFU", "speedup", "efficiency", "EM", "F1", "validation loss",
          "validation loss by epoch", "held MiB/rank", "peak MiB/rank"]
ALIGN = ["---", "---", "---", "---", "---", "---", "--:", "--:", "--:", "--:", "--:", "--:", "--:", "--:", "--:", "--:",
         "--:", "--:", "---", "--:", "--:"]
MIB = 1024.0 * 1024.0
RUNTIME_MARK = "\u2020"  # a speedup over train_runtime, not over the steps


def table_rows(runs):
    rows = []
    for run in runs:
        mark = RUNTIME_MARK if run.speedup is not None and run.speedup_basis == "runtime" else ""
        rows.append([
            md_escape(run.label),
            md_escape(run.source),
            md_escape(run.model),
            md_escape(run.device()),
            md_escape(run.padding),
            md_escape(run.strategy),
            DASH if run.ranks is None else str(run.ranks),
            fmt_num(run.epoch, 3),
            fmt_duration(run.runtime),
            fmt_num(run.step_samples_per_second, 2),
            fmt_num(run.steady_samples_per_second, 2),
            fmt_num(run.runtime_samples_per_second, 2),
            DASH if run.mfu is None else "%.1f%%" % (100.0 * run.mfu),
            fmt_num(run.speedup, 2) + mark,
            fmt_pct(run.efficiency) + (mark if run.efficiency is not None else ""),
            fmt_num(run.em, 2),
            fmt_num(run.f1, 2),
            fmt_num(run.eval_loss, 4),
            fmt_eval_history(run),
            DASH if run.memory is None else fmt_num(run.memory.held_total / MIB, 1),
            fmt_peak(run.memory),
        ])
    return rows


def fmt_epoch(epoch):
    return ("%.2f" % epoch).rstrip("0").rstrip(".")


def fmt_eval_history(run):
    """Each evaluation's loss, labelled by the epochs done ("1: 1.0312, 2: 0.9876") where the source
    records them, else by the step."""
    if not run.eval_points:
        return DASH
    parts = []
    for step in sorted(run.eval_points):
        epoch = run.eval_epochs.get(step)
        where = fmt_epoch(epoch) if epoch is not None else "step %d" % step
        parts.append("%s: %.4f" % (where, run.eval_points[step]))
    return ", ".join(parts)


def fmt_peak(memory):
    if memory is None or memory.peak is None:
        return DASH
    return "%s %s" % (fmt_num(memory.peak / MIB, 0), memory.peak_kind)


def markdown_table(runs):
    rows = table_rows(runs)
    widths = [max(len(h), len(a), *(len(r[i]) for r in rows)) for i, (h, a) in
              enumerate(zip(HEADER, ALIGN))]

    def line(cells, align=False):
        out = []
        for i, c in enumerate(cells):
            if align:
                c = c[:-1] + "-" * (widths[i] - len(c)) + c[-1]
            out.append(c.rjust(widths[i]) if ALIGN[i] == "--:" and not align else c.ljust(widths[i]))
        return "| " + " | ".join(out) + " |"

    lines = [line(HEADER), line(ALIGN, align=True)]
    lines += [line(r) for r in rows]
    return "\n".join(lines)


def steady_note(runs):
    """What the steady samples/s leave out, from the runs that record them."""
    afters = sorted({r.steady_after for r in runs if r.steady_samples_per_second is not None and r.steady_after})
    if not afters:
        return ""
    return (" Steady samples/s = over the training steps after the first %s (their warm-up: allocator, "
            "kernel choice), beside samples/s over every step." % " or ".join(str(a) for a in afters))


def baseline_note(baseline, runs=()):
    if baseline.ranks is not None:
        ranks_text = "%d rank%s" % (baseline.ranks, "" if baseline.ranks == 1 else "s")
    else:
        ranks_text = "unknown ranks"
    return ("Baseline: **%s** (%s, %s samples/s). Speedup = samples/s / the baseline's, over the training "
            "steps alone (samples/s: no setup, evaluation or checkpoints) where both runs record it, "
            "otherwise over train_runtime (samples/s incl. setup, as HF's train_samples_per_second; "
            "marked %s); parallel efficiency = speedup / (ranks / baseline ranks). Training time is "
            "train_runtime (as HF: from the first step, evaluations and checkpoints during training included; Lightning: the "
            "training loop's time); EM/F1 in %%, validation loss from the final evaluation, and by epoch every "
            "evaluation's (epochs done: loss; by step where the source records no epoch). Memory per rank: held = "
            "parameters + gradients + optimizer state between steps, of the rank that holds the most; peak = the "
            "largest rank's peak resident set (RSS, on a CPU) or peak GPU memory allocated (GPU). MFU = model FLOPs on real "
            "tokens (not padding) per second over the training steps / the matrix-product rate the run's ranks measured "
            "at setup in the run's precision (float32 or bf16), summed over the ranks. No speedup is computed between "
            "runs on different kinds of device (CPU and GPU, or two models): it would measure the devices."
            % (md_escape(baseline.label), ranks_text, fmt_num(baseline.samples_per_second, 2), RUNTIME_MARK)
            + steady_note(runs))


def unrecorded_note(runs):
    """What each run's source does not record, and why (never estimated)."""
    lines = []
    for run in runs:
        for figure, why in run.lacking:
            lines.append("- `%s` (%s): no %s: %s." % (run.label, run.source, figure, why))
        for note in run.notes:
            lines.append("- `%s` (%s): %s." % (run.label, run.source, note))
    return "Not recorded, and notes:\n\n" + "\n".join(lines) if lines else ""


# ---------------------------------------------------------------------------------------------
# Plots


def setup_matplotlib():
    try:
        import matplotlib
    except ImportError:
        sys.exit("%s: matplotlib is missing from %s: run tools/compare, which takes the checkout's .venv "
                 "(bash scripts/install-deps.sh installs the tools there), or pip install ./tools into this "
                 "Python" % (PROG, sys.executable))
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    plt.rcParams.update({
        "figure.dpi": 110, "savefig.dpi": 110, "font.size": 11, "axes.titlesize": 13,
        "axes.labelsize": 12, "legend.fontsize": 10, "axes.grid": True, "grid.alpha": 0.3,
    })
    return plt


def colors_for(plt, runs):
    cycle = plt.get_cmap("tab10").colors if len(runs) <= 10 else \
        [plt.get_cmap("tab20")(i % 20) for i in range(len(runs))]
    return {run.label: cycle[i % len(cycle)] for i, run in enumerate(runs)}


def run_legend(run):
    bits = []
    if run.ranks is not None:
        bits.append("%d rank%s" % (run.ranks, "" if run.ranks == 1 else "s"))
    if run.strategy and run.strategy != "single":
        bits.append(run.strategy)
    if run.global_batch is not None:
        bits.append("global batch %d" % run.global_batch)
    return "%s (%s)" % (run.label, ", ".join(bits)) if bits else run.label


def smooth(values, window):
    out, acc = [], 0.0
    for i, v in enumerate(values):
        acc += v
        if i >= window:
            acc -= values[i - window]
        out.append(acc / min(i + 1, window))
    return out


def plot_loss(plt, runs, colors, title, path):
    many = len(runs) > 4  # then the legend goes beside the plot, where it hides no point
    fig, ax = plt.subplots(figsize=(15, 6.5) if many else (10, 6))
    plotted = False
    # Runs that compute the same thing (ddp and zero1 on the same data) draw the same curve:
    # line styles, widths and marker shapes differ so that none hides another.
    styles = ["-", "--", "-.", ":"]
    emarkers = ["D", "s", "^", "v", "o", "P", "X", "*"]
    for i, run in enumerate(runs):
        color = colors[run.label]
        style = styles[i % len(styles)]
        width = max(1.4, 3.0 - 0.5 * i)
        steps = sorted(run.train_points)
        losses = [run.train_points[s] for s in steps]
        if steps:
            plotted = True
            if len(steps) > 150:  # long runs: the raw curve faint, a moving average on top
                ax.plot(steps, losses, color=color, alpha=0.25, linewidth=0.8)
                ax.plot(steps, smooth(losses, max(5, len(steps) // 50)), color=color,
                        linestyle=style, linewidth=width, label="%s train" % run_legend(run))
            else:
                ax.plot(steps, losses, color=color, linestyle=style, linewidth=width,
                        marker="." if len(steps) <= 60 else None, markersize=7,
                        label="%s train" % run_legend(run))
        esteps = sorted(run.eval_points)
        if esteps:
            plotted = True
            ax.plot(esteps, [run.eval_points[s] for s in esteps], linestyle="none",
                    marker=emarkers[i % len(emarkers)], markersize=max(6, 11 - 1.5 * i), markeredgecolor="black", markeredgewidth=0.8, color=color,
                    label="%s eval" % run.label)
    missing = [r.label for r in runs if not r.train_points and not r.eval_points]
    if plotted and missing:
        ax.text(0.01, 0.01, "no metrics.jsonl (or no loss in it): " + ", ".join(missing),
                transform=ax.transAxes, fontsize=9, color="dimgray", va="bottom")
    if not plotted:
        ax.text(0.5, 0.5, "no metrics.jsonl in any run", ha="center", va="center",
                transform=ax.transAxes, fontsize=14, color="gray")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss (cross-entropy of answer start/end)")
    ax.set_title("%s\nTraining loss (lines) and validation loss (large markers) per step" % title)
    ax.xaxis.get_major_locator().set_params(integer=True)
    if plotted and many:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), framealpha=0.9, fontsize=9)
    elif plotted:
        ax.legend(loc="upper right", framealpha=0.9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def place_labels(fig, ax, items):
    """Run names beside their points; at the same rank count, stacked so that none overlaps."""
    fig.canvas.draw()  # settle the axes' size, so data-to-pixel transforms are final
    px_per_pt = fig.dpi / 72.0
    gap = 12 * px_per_pt
    by_x = {}
    for x, y, text in items:
        by_x.setdefault(x, []).append((y, text))
    for x, points in by_x.items():
        points.sort(key=lambda p: -p[0])
        previous = None
        for y, text in points:
            py = ax.transData.transform((x, y))[1]
            want = py + 5 * px_per_pt
            if previous is not None and want > previous - gap:
                want = previous - gap
            previous = want
            ax.annotate(text, (x, y), textcoords="offset points",
                        xytext=(8, (want - py) / px_per_pt), fontsize=9, color="dimgray")


def plot_scaling(plt, runs, baseline, title, path):
    fig, (ax_tp, ax_sp) = plt.subplots(1, 2, figsize=(13, 5.8))
    usable = [r for r in runs if r.ranks is not None and r.samples_per_second is not None]
    groups = {}
    for run in usable:
        groups.setdefault(run.group(), []).append(run)
    markers = ["o", "s", "^", "D", "v", "P", "X", "*"]
    cmap = plt.get_cmap("tab10").colors
    max_ranks = max([r.ranks for r in usable] + [baseline.ranks or 1, 1])
    min_ranks = min([r.ranks for r in usable] + [baseline.ranks or 1])
    annotate = len(usable) <= 8
    labels_tp, labels_sp = [], []
    for i, (group, members) in enumerate(sorted(groups.items(), key=lambda kv: (
            kv[0] != "single", kv[0]))):
        members.sort(key=lambda r: (r.ranks, r.label))
        xs = [r.ranks for r in members]
        kw = dict(marker=markers[i % len(markers)], color=cmap[i % len(cmap)], markersize=9,
                  linewidth=1.5, label=group)
        ax_tp.plot(xs, [r.samples_per_second for r in members], **kw)
        sp = [(r.ranks, r.speedup) for r in members if r.speedup is not None]
        if sp:
            ax_sp.plot([x for x, _ in sp], [y for _, y in sp], **kw)
        if annotate:
            for r in members:
                labels_tp.append((r.ranks, r.samples_per_second, r.label))
                if r.speedup is not None:
                    labels_sp.append((r.ranks, r.speedup, r.label))
    # Ideal: throughput proportional to the number of ranks, from the baseline.
    if baseline.ranks and baseline.samples_per_second is not None:
        lo, hi = min(min_ranks, baseline.ranks), max_ranks
        xs = [lo, hi] if hi > lo else [lo, lo + 1]
        ax_tp.plot(xs, [baseline.samples_per_second * x / baseline.ranks for x in xs],
                   linestyle="--", color="gray", linewidth=1.2, label="ideal (linear)")
        ax_sp.plot(xs, [x / baseline.ranks for x in xs], linestyle="--", color="gray",
                   linewidth=1.2, label="ideal (linear)")
    # Room right of the last point and above the highest one for the run names.
    tp_top = max([r.samples_per_second for r in usable] + [0.0])
    sp_top = max([r.speedup for r in usable if r.speedup is not None] + [0.0])
    if baseline.ranks and baseline.samples_per_second is not None:
        tp_top = max(tp_top, baseline.samples_per_second * max_ranks / baseline.ranks)
        sp_top = max(sp_top, max_ranks / baseline.ranks)
    for ax, top in ((ax_tp, tp_top), (ax_sp, sp_top)):
        ax.set_xlabel("MPI ranks")
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.set_xlim(0, max_ranks * 1.12 + 0.6)
        ax.set_ylim(0, (top or 1.0) * 1.3)
        ax.legend(title="strategy", loc="upper left", framealpha=0.9)
    for ax, items in ((ax_tp, labels_tp), (ax_sp, labels_sp)):
        place_labels(fig, ax, items)
    ax_tp.set_ylabel("training samples/s (steps alone where recorded, else incl. setup)")
    ax_tp.set_title("Throughput")
    ax_sp.set_ylabel("speedup over baseline (\u00d7)")
    ax_sp.set_title("Speedup vs. %s" % baseline.label)
    if not usable:
        ax_tp.text(0.5, 0.5, "no run has ranks and samples/s", ha="center", va="center",
                   transform=ax_tp.transAxes, color="gray")
    fig.suptitle("%s \u2013 scaling" % title, fontsize=14)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_phases(plt, runs, title, path):
    height = max(3.5, 1.2 + 0.65 * len(runs))
    fig, ax = plt.subplots(figsize=(11.5, height))
    cmap = plt.get_cmap("tab10").colors
    labels = [run_legend(r) for r in runs]
    ys = list(range(len(runs)))[::-1]  # first run on top
    totals = []
    for run in runs:
        totals.append(sum(num(run.phases.get(k)) or 0.0 for k, _ in PHASES))
    xmax = max(totals + [1e-9])
    left = [0.0] * len(runs)
    for p, (key, name) in enumerate(PHASES):
        widths = [num(r.phases.get(key)) or 0.0 for r in runs]
        bars = ax.barh(ys, widths, left=left, height=0.6, color=cmap[p], label=name,
                       edgecolor="white", linewidth=0.6)
        for bar, w, total in zip(bars, widths, totals):
            if total > 0 and w / xmax >= 0.07:
                ax.text(bar.get_x() + w / 2, bar.get_y() + bar.get_height() / 2,
                        "%.0f%%" % (100 * w / total), ha="center", va="center", fontsize=9,
                        color="white", fontweight="bold")
        left = [a + b for a, b in zip(left, widths)]
    for y, total, run in zip(ys, totals, runs):
        text = "%s s" % fmt_num(total, 1) if total > 0 else "no phase_seconds"
        ax.text(total + xmax * 0.01, y, text, va="center", fontsize=9)
    ax.set_yticks(ys)
    ax.set_yticklabels(labels)
    ax.set_xlim(0, xmax * 1.15)
    ax.set_xlabel("seconds (slowest rank per phase)")
    ax.set_title("%s\nWhere the time went, per phase" % title)
    ax.grid(axis="y", visible=False)
    ax.legend(title="phase", loc="center left", bbox_to_anchor=(1.01, 0.5), framealpha=0.9)
    fig.tight_layout()
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)


MEMORY_PARTS = [("parameter_bytes", "parameters"), ("gradient_bytes", "gradients"),
                ("optimizer_state_bytes", "optimizer state (AdamW moments)")]


def plot_memory(plt, runs, title, path):
    """Per rank, by run: what is held between steps, by kind (left), and the peak (right)."""
    shown = [r for r in runs if r.memory is not None]
    height = max(3.5, 1.4 + 0.6 * len(shown))
    fig, (ax_held, ax_peak) = plt.subplots(1, 2, figsize=(13, height), sharey=True,
                                           gridspec_kw={"width_ratios": [3, 2]})
    cmap = plt.get_cmap("tab10").colors
    ys = list(range(len(shown)))[::-1]  # first run on top
    left = [0.0] * len(shown)
    for k, (key, name) in enumerate(MEMORY_PARTS):
        widths = [r.memory.held[key] / MIB for r in shown]
        ax_held.barh(ys, widths, left=left, height=0.6, color=cmap[k], label=name, edgecolor="white",
                     linewidth=0.6)
        left = [a + b for a, b in zip(left, widths)]
    held_max = max(left + [1e-9])
    for y, total in zip(ys, left):
        ax_held.text(total + held_max * 0.01, y, "%s MiB" % fmt_num(total, 1), va="center", fontsize=9)
    ax_held.set_xlim(0, held_max * 1.25)
    ax_held.set_xlabel("MiB per rank, held between steps (the rank holding the most)")
    ax_held.set_title("Parameters, gradients, optimizer state")
    peaks = [(r.memory.peak or 0.0) / MIB for r in shown]
    kinds = [r.memory.peak_kind or "" for r in shown]
    ax_peak.barh(ys, peaks, height=0.6, color=[cmap[4] if k == "GPU" else cmap[7] for k in kinds])
    peak_max = max(peaks + [1e-9])
    for y, value, kind in zip(ys, peaks, kinds):
        text = "%s MiB %s" % (fmt_num(value, 0), kind) if value else "not recorded"
        ax_peak.text(value + peak_max * 0.01, y, text, va="center", fontsize=9)
    ax_peak.set_xlim(0, peak_max * 1.45)
    ax_peak.set_xlabel("MiB, peak of the largest rank")
    ax_peak.set_title("Peak (RSS on a CPU, allocated on a GPU)")
    ax_held.set_yticks(ys)
    ax_held.set_yticklabels([run_legend(r) for r in shown])
    for ax in (ax_held, ax_peak):
        ax.grid(axis="y", visible=False)
    if shown:
        fig.legend(*ax_held.get_legend_handles_labels(), loc="lower center", ncol=3, fontsize=9)
    else:
        ax_held.text(0.5, 0.5, "no run records memory per rank", ha="center", va="center",
                     transform=ax_held.transAxes, fontsize=13, color="gray")
    fig.suptitle("%s \u2013 memory per rank by strategy" % title, fontsize=14)
    fig.tight_layout(rect=(0, 0.45 / height, 1, 1))  # room for the legend below
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)


# ---------------------------------------------------------------------------------------------


def unique_labels(runs):
    """Directory names, with enough parent components to tell runs apart."""
    for run in runs:
        run.label = run.name
    for depth in range(2, 8):
        seen = {}
        for run in runs:
            seen.setdefault(run.label, []).append(run)
        clashes = [rs for rs in seen.values() if len(rs) > 1]
        if not clashes:
            return
        for rs in clashes:
            for run in rs:
                parts = os.path.normpath(run.dir).split(os.sep)
                run.label = "/".join(parts[-depth:])
    for i, run in enumerate(runs):  # the same directory given twice
        run.label = "%s#%d" % (run.label, i + 1)


def apply_stated(runs, ranks, strategies):
    """--ranks DIR=N and --strategy DIR=NAME: what a run's own files leave out."""
    def parse(items, option):
        stated = {}
        for item in items:
            path, sep, value = item.rpartition("=")
            if not sep or not path or not value:
                raise RunError("%s %s: expected RUN_DIR=VALUE" % (option, item))
            matches = [r for r in runs if os.path.realpath(r.path) == os.path.realpath(path)]
            if not matches:
                raise RunError("%s %s: %s is not one of the runs given" % (option, item, path))
            for run in matches:
                stated[id(run)] = (run, value)
        return stated.values()
    for run, value in parse(ranks, "--ranks"):
        if not value.isdigit() or int(value) < 1:
            raise RunError("--ranks %s=%s: expected a positive number of processes" % (run.path, value))
        run.lacking = [(f, w) for f, w in run.lacking if f != "ranks"]
        run.set_ranks(int(value))
        run.notes.append("ranks %s as stated with --ranks" % value)
    for run, value in parse(strategies, "--strategy"):
        run.strategy = value
        run.notes.append("strategy %s as stated with --strategy" % value)


STRATEGY_ORDER = ("single", "ddp", "zero1", "zero2", "fsdp")  # by how much a rank shards


def strategy_rank(strategy):
    """Rows of the same rank count: the strategies in STRATEGY_ORDER, others after them."""
    return STRATEGY_ORDER.index(strategy) if strategy in STRATEGY_ORDER else len(STRATEGY_ORDER)


def set_speedups(runs, baseline):
    """Each run against the baseline, over the steps where both record that throughput, else over
    train_runtime where both record that."""
    for run in runs:
        run.speedup = run.efficiency = run.speedup_basis = None
        why = run.differs_in_device(baseline) if run is not baseline else None
        if why:
            run.notes.append("no speedup against the baseline: %s, and a speedup across kinds of device would "
                             "measure the devices, not the parallelism" % why)
            continue
        for basis in ("steps", "runtime"):
            mine, theirs = run.throughput(basis), baseline.throughput(basis)
            if mine is not None and theirs:
                run.speedup, run.speedup_basis = mine / theirs, basis
                if run.ranks and baseline.ranks:
                    run.efficiency = run.speedup / (run.ranks / baseline.ranks)
                break


def main(argv):
    parser = argparse.ArgumentParser(
        prog="tools/compare",
        description="Compare mpibert run directories: a Markdown table (stdout and "
                    "comparison.md) and loss.png, scaling.png, phases.png, memory.png.")
    parser.add_argument("runs", nargs="+", metavar="RUN_DIR",
                        help="an mpibert run directory, an HF Trainer output_dir or a Lightning CSV log")
    parser.add_argument("--baseline", metavar="RUN_DIR",
                        help="run the speedup is relative to (default: the fewest ranks, "
                             "then the first given)")
    parser.add_argument("--out", metavar="DIR", default=".",
                        help="where the plots and comparison.md go (default: .)")
    parser.add_argument("--title", metavar="T", default="mpibert run comparison")
    parser.add_argument("--ranks", metavar="RUN_DIR=N", action="append", default=[],
                        help="the number of processes of a run whose files do not record it (HF Trainer)")
    parser.add_argument("--strategy", metavar="RUN_DIR=NAME", action="append", default=[],
                        help="the strategy of a run whose files do not record it (ddp, fsdp, deepspeed...)")
    args = parser.parse_args(argv)

    paths = list(args.runs)
    baseline_index = None
    if args.baseline is not None:
        want = os.path.realpath(args.baseline)
        for i, p in enumerate(paths):
            if os.path.realpath(p) == want:
                baseline_index = i
                break
        if baseline_index is None:
            paths.append(args.baseline)
            baseline_index = len(paths) - 1
    try:
        runs = [read_run(p, i) for i, p in enumerate(paths)]
        apply_stated(runs, args.ranks, args.strategy)
    except RunError as e:
        print("%s: error: %s" % (PROG, e), file=sys.stderr)
        return 1
    unique_labels(runs)

    if baseline_index is not None:
        baseline = runs[baseline_index]
    else:
        baseline = min(runs, key=lambda r: (r.ranks if r.ranks is not None else math.inf, r.order))
    set_speedups(runs, baseline)

    ordered = sorted(runs, key=lambda r: (r.ranks if r.ranks is not None else math.inf,
                                          strategy_rank(r.strategy), r.label, r.order))
    table = markdown_table(ordered)
    note = baseline_note(baseline, ordered)
    unrecorded = unrecorded_note(ordered)
    print(table)
    print()
    print(note)
    if unrecorded:
        print()
        print(unrecorded)

    try:
        os.makedirs(args.out, exist_ok=True)
    except OSError as e:
        print("%s: error: cannot create --out %s: %s" % (PROG, args.out, e), file=sys.stderr)
        return 1
    plt = setup_matplotlib()
    colors = colors_for(plt, ordered)
    images = [("loss.png", "Training and validation loss"),
              ("scaling.png", "Throughput and speedup against ranks"),
              ("phases.png", "Time per phase"),
              ("memory.png", "Memory per rank by strategy")]
    plot_loss(plt, ordered, colors, args.title, os.path.join(args.out, "loss.png"))
    plot_scaling(plt, ordered, baseline, args.title, os.path.join(args.out, "scaling.png"))
    plot_phases(plt, ordered, args.title, os.path.join(args.out, "phases.png"))
    plot_memory(plt, ordered, args.title, os.path.join(args.out, "memory.png"))

    md = ["# %s" % args.title, "", table, "", note, ""] + ([unrecorded, ""] if unrecorded else []) + ["Runs:", ""]
    # Relative to the report, so that the same runs give the same file in any checkout.
    for run in ordered:
        md.append("- `%s`: %s" % (run.label, os.path.relpath(run.dir, args.out)))
    md.append("")
    for name, caption in images:
        md += ["## %s" % caption, "", "![%s](%s)" % (caption, name), ""]
    with open(os.path.join(args.out, "comparison.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(md))
    print()
    print("plots: %s" % ", ".join(os.path.join(args.out, n) for n, _ in images))
    print("report: %s" % os.path.join(args.out, "comparison.md"))
    return 0


def cli():
    """The console script (pyproject.toml's [project.scripts])."""
    sys.exit(main(sys.argv[1:]))


if __name__ == "__main__":
    cli()
