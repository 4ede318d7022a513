"""mpibert-report: a run directory in MLflow or Weights & Biases, through their own Python SDKs.

    mpibert-report mlflow RUN_DIR [--run-id ID]   send a run (finished, or what a live run could not send)
    mpibert-report wandb RUN_DIR                  the run as a W&B run (online, or offline for `wandb sync`)
    mpibert-report wandb RUN_DIR --follow         mpibert train's companion (it starts this itself)

What is sent is what the run directory holds: RUN/report.json (the run's name, its parameters under
HF's names and its tags, the trackers' runs), RUN/metrics.jsonl (a line per logging step and per
evaluation) and RUN/results.json (the final results). Both trackers are configured by the
environment variables HF's integrations read (MLFLOW_TRACKING_URI, MLFLOW_EXPERIMENT_NAME,
MLFLOW_RUN_ID, MLFLOW_TAGS, MLFLOW_NESTED_RUN; WANDB_PROJECT, WANDB_ENTITY, WANDB_MODE, WANDB_DIR,
WANDB_RUN_ID, WANDB_RESUME, WANDB_API_KEY). MLflow's metrics carry metrics.jsonl's names; W&B's
carry HF's WandbCallback's (train/loss, eval/f1, against train/global_step), so that mpibert's runs
and HF Trainer's chart together.

--follow is the W&B companion of `mpibert train --report-to wandb` (src/report/wandb_companion.cpp):
its standard input gives the run's description (one JSON line), then "follow" once the run
directory is in place, then "end completed|stopped|failed"; its standard output answers one JSON
line once the W&B run is open, or why not. It follows RUN/metrics.jsonl until the end, or until
its input closes without one (the trainer died: the W&B run is marked crashed).
"""
import argparse
import json
import math
import os
import select
import signal
import sys
import time
import urllib.parse

REPORT = "report.json"
# MLflow's limits (mlflow.utils.validation): parameters or tags per call, metrics per call, a parameter's length.
PARAMS_PER_BATCH, METRICS_PER_BATCH, LONGEST_PARAM = 100, 1000, 6000
# Tags W&B shows as labels, as "name:value".
WANDB_TAGS = ("model_type", "strategy", "world_size", "device")
TRUE = {"1", "TRUE", "YES", "ON"}


class Refusal(Exception):
    """A message for the user; the command exits 1."""


# --- the run directory ------------------------------------------------------------------------

def read_report(run_dir):
    path = os.path.join(run_dir, REPORT)
    try:
        with open(path) as f:
            report = json.load(f)
    except FileNotFoundError:
        raise Refusal(f"{path}: missing: not the run directory of an mpibert train that records its report")
    except json.JSONDecodeError as e:
        raise Refusal(f"{path}: not JSON: {e}")
    for key in ("run_name", "params", "tags"):
        if key not in report:
            raise Refusal(f"{path}: no \"{key}\"")
    report.setdefault("trackers", {})
    return report


def write_tracker_record(run_dir, name, record):
    """RUN/report.json's trackers.NAME, replaced atomically."""
    path = os.path.join(run_dir, REPORT)
    report = read_report(run_dir)
    report["trackers"][name] = record
    temporary = path + ".tmp"
    with open(temporary, "w") as f:
        f.write(json.dumps(report, indent=2) + "\n")
    os.replace(temporary, path)


def line_kind(line):
    return "eval" if any(key.startswith("eval_") for key in line) else "train"


def read_metrics(run_dir):
    """metrics.jsonl's lines, the last line of each step and kind (a resumed job logs its steps again)."""
    path = os.path.join(run_dir, "metrics.jsonl")
    lines = {}
    if os.path.exists(path):
        with open(path) as f:
            for number, text in enumerate(f, 1):
                if not text.endswith("\n"):
                    break  # a line still being written
                try:
                    line = json.loads(text)
                except json.JSONDecodeError as e:
                    raise Refusal(f"{path}: line {number}: not JSON: {e}")
                lines[(line["step"], line_kind(line))] = line
    return [lines[key] for key in sorted(lines, key=lambda k: (k[0], k[1] != "train"))]


def read_results(run_dir):
    path = os.path.join(run_dir, "results.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def numbers(line):
    """A line's values a tracker takes as metrics: numbers, booleans as 0/1 (as HF's integrations), not the step."""
    return {key: float(value) for key, value in line.items()
            if key != "step" and isinstance(value, (int, float))}


def final_results(results, lines):
    """results.json's numbers that no metrics line carries (train_runtime, train_loss, ...): the run's end."""
    logged = {key for line in lines for key in line}
    return {key: float(value) for key, value in (results or {}).items()
            if isinstance(value, (int, float)) and not isinstance(value, bool) and key != "global_step"
            and key not in logged}


def param_text(value):
    return value if isinstance(value, str) else json.dumps(value)


def without_credentials(uri):
    parts = urllib.parse.urlsplit(uri)
    if "@" not in parts.netloc:
        return uri
    return urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))


# --- MLflow -----------------------------------------------------------------------------------

def mlflow_run(client, report, shown_uri, run_id):
    """The run to send to: --run-id, MLFLOW_RUN_ID, the run recorded for this server, else a new one."""
    nested = os.environ.get("MLFLOW_NESTED_RUN", "").upper() in TRUE
    recorded = report["trackers"].get("mlflow", {})
    if not run_id and os.environ.get("MLFLOW_RUN_ID") and not nested:
        run_id = os.environ["MLFLOW_RUN_ID"]
    if not run_id and recorded.get("tracking_uri") == shown_uri:
        run_id = recorded.get("run_id")
    if run_id:
        return client.get_run(run_id), False
    experiment = os.environ.get("MLFLOW_EXPERIMENT_ID") or "0"
    name = os.environ.get("MLFLOW_EXPERIMENT_NAME")
    if name:
        found = client.get_experiment_by_name(name)
        experiment = found.experiment_id if found else client.create_experiment(name)
    tags = {key: param_text(value) for key, value in report["tags"].items()}
    tags.update({"mlflow.runName": report["run_name"], "mlflow.source.name": "mpibert train",
                 "mlflow.source.type": "LOCAL"})
    if "git_commit" in report["tags"]:
        tags["mlflow.source.git.commit"] = report["tags"]["git_commit"]
    if nested:
        parent = client.get_run(os.environ["MLFLOW_RUN_ID"])
        experiment = parent.info.experiment_id
        tags["mlflow.parentRunId"] = parent.info.run_id
    tags.update({key: param_text(value) for key, value in json.loads(os.environ.get("MLFLOW_TAGS") or "{}").items()})
    return client.create_run(experiment, run_name=report["run_name"], tags=tags), True


def metric_key(step, value):
    return (step, "nan" if math.isnan(value) else value)


def send_mlflow(run_dir, run_id=None):
    import mlflow
    from mlflow.entities import Metric, Param, RunStatus
    from mlflow.tracking import MlflowClient

    report = read_report(run_dir)
    uri = os.environ.get("MLFLOW_TRACKING_URI") or mlflow.get_tracking_uri()
    shown = without_credentials(uri)
    client = MlflowClient(tracking_uri=uri)
    run, made = mlflow_run(client, report, shown, run_id)
    run_id = run.info.run_id
    # Parameters are set once in MLflow: only those the run lacks.
    there = run.data.params
    params = [Param(key, param_text(value)) for key, value in report["params"].items()
              if key not in there and len(param_text(value)) <= LONGEST_PARAM]
    for i in range(0, len(params), PARAMS_PER_BATCH):
        client.log_batch(run_id, params=params[i:i + PARAMS_PER_BATCH])
    # Metric values the run lacks, step by step (what a live run could not send).
    lines = read_metrics(run_dir)
    results = read_results(run_dir)
    wanted = [(key, value, line["step"]) for line in lines for key, value in numbers(line).items()]
    if results is not None:
        wanted += [(key, value, results["global_step"]) for key, value in final_results(results, lines).items()]
    history = {}
    for key in {key for key, _, _ in wanted}:
        history[key] = {}
        for metric in client.get_metric_history(run_id, key):
            mark = metric_key(metric.step, metric.value)
            history[key][mark] = history[key].get(mark, 0) + 1
    now = int(time.time() * 1000)
    missing = []
    for key, value, step in wanted:
        mark = metric_key(step, value)
        if history[key].get(mark, 0) > 0:
            history[key][mark] -= 1
        else:
            missing.append(Metric(key, value, now, step))
    for i in range(0, len(missing), METRICS_PER_BATCH):
        client.log_batch(run_id, metrics=missing[i:i + METRICS_PER_BATCH])
    status = None
    if results is not None:
        status = "KILLED" if results.get("stopped_early") else "FINISHED"
        client.set_terminated(run_id, RunStatus.to_string(RunStatus.from_string(status)))
    write_tracker_record(run_dir, "mlflow", {"tracking_uri": shown, "experiment_id": run.info.experiment_id,
                                             "run_id": run_id, "unsent_values": 0})
    print(f"mlflow: {'new ' if made else ''}run {run_id} (experiment {run.info.experiment_id}) at {shown}: "
          f"{len(params)} parameters, {len(missing)} of {len(wanted)} metric values sent (the others were there)"
          + (f", status {status}" if status else ", no results.json: its status is left as it is"))


# --- Weights & Biases -------------------------------------------------------------------------

def hf_wandb_names(line):
    """HF's WandbCallback's names (transformers' rewrite_logs): eval_X -> eval/X, others train/X;
    the step as train/global_step, the x-axis of every metric."""
    logged = {("eval/" + key[5:] if key.startswith("eval_") else "train/" + key): value
              for key, value in line.items() if key != "step"}
    logged["train/global_step"] = line["step"]
    return logged


class Companion:
    """The protocol with mpibert train: its lines in, the one answer out."""

    def __init__(self):
        os.closerange(3, 1 << 16)  # the rank's MPI sockets and files are not this process's
        self.answer_to = os.fdopen(os.dup(1), "w")
        os.dup2(2, 1)  # whatever a library prints goes to the job's error output, not into the answer
        self.buffer = b""
        self.closed = False
        first = self.read_line(None)
        if first is None:
            raise Refusal("mpibert-report wandb --follow: no description on standard input")
        self.start = json.loads(first)

    def answer(self, status, message, record=None):
        self.answer_to.write(json.dumps({"status": status, "message": message, "record": record or {}}) + "\n")
        self.answer_to.flush()

    def read_line(self, timeout):
        """The trainer's next line; "" when none came within timeout; None once its pipe closed."""
        while b"\n" not in self.buffer:
            if self.closed:
                return None
            ready, _, _ = select.select([0], [], [], timeout)
            if not ready:
                return ""
            data = os.read(0, 4096)
            if not data:
                self.closed = True
                continue
            self.buffer += data
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line.decode()


def wandb_init(wandb, run_dir, start, resumed_record):
    """The W&B run: WANDB_RUN_ID (or the earlier job's on a resume) continued, else a new one."""
    run_id = os.environ.get("WANDB_RUN_ID") or resumed_record.get("run_id")
    resume = os.environ.get("WANDB_RESUME") or ("allow" if run_id else None)
    directory = os.environ.get("WANDB_DIR") or run_dir
    os.makedirs(directory, exist_ok=True)
    tags = [f"{key}:{start['tags'][key]}" for key in WANDB_TAGS if key in start["tags"]]
    run = wandb.init(project=os.environ.get("WANDB_PROJECT") or "mpibert", entity=os.environ.get("WANDB_ENTITY"),
                     name=start["run_name"], id=run_id, resume=resume, dir=directory, job_type="train",
                     config=start["params"], tags=tags, settings=wandb.Settings(console="off"))
    run.define_metric("train/global_step")
    run.define_metric("*", step_metric="train/global_step", step_sync=True)
    offline = run.settings.mode in ("offline", "dryrun")
    record = {"run_id": run.id, "project": run.project, "entity": run.entity or "",
              "mode": "offline" if offline else "online", "dir": os.path.abspath(os.path.dirname(run.dir))}
    return run, record


def finish_wandb(run, results, lines, end):
    for key, value in final_results(results, lines).items():
        run.summary[key] = value
    if end == "stopped":
        run.mark_preempting()
    run.finish(exit_code=0 if end in ("completed", "stopped") else 1)


def follow_metrics(run, companion, path, offset):
    """metrics.jsonl's new lines into W&B as they come, until the trainer's "end" or its pipe closing."""
    position, partial, lines = offset, b"", []
    end = None
    while True:
        command = companion.read_line(1.0)
        if command is None:
            end = "crashed"
        elif command.startswith("end"):
            end = command.split()[1] if len(command.split()) > 1 else "completed"
        if os.path.exists(path):
            with open(path, "rb") as f:
                f.seek(position)
                data = f.read()
            position += len(data)
            partial += data
            *complete, partial = partial.split(b"\n")
            for text in complete:
                line = json.loads(text)
                lines.append(line)
                run.log(hf_wandb_names(line))
        if end:
            return end, lines


def report_wandb(run_dir, follow):
    companion = Companion() if follow else None
    if companion:
        start = companion.start
        resumed = (start.get("earlier") or {}).get("wandb") or {}
    else:
        report = read_report(run_dir)
        start = {"run_name": report["run_name"], "params": report["params"], "tags": report["tags"]}
        resumed = {}
    if (os.environ.get("WANDB_MODE") or "").lower() in ("offline", "dryrun"):
        os.environ.pop("WANDB_API_KEY", None)  # offline, the key is not needed: it stays out of every file
    try:
        import wandb
    except ImportError as e:
        if companion:
            companion.answer("unavailable", f"the wandb package is not installed for {sys.executable} ({e})")
            return 1
        raise Refusal(f"the wandb package is not installed for {sys.executable}: pip install './tools[trackers]'")
    try:
        run, record = wandb_init(wandb, run_dir, start, resumed)
    except Exception as e:  # wandb's errors have no common base: what it says is the reason
        if companion:
            companion.answer("refused", f"wandb.init failed: {type(e).__name__}: {e}")
            return 1
        raise Refusal(f"wandb.init failed: {type(e).__name__}: {e}")
    where = f"offline in {record['dir']} (wandb sync it)" if record["mode"] == "offline" else "online"
    message = f"run {record['run_id']} in project {record['project']}, {where}"
    if not companion:
        lines = read_metrics(run_dir)
        for line in lines:
            run.log(hf_wandb_names(line))
        results = read_results(run_dir)
        finish_wandb(run, results, lines, "completed" if results and not results.get("stopped_early") else "stopped")
        write_tracker_record(run_dir, "wandb", record)
        print(f"wandb: {message}: {len(lines)} lines of metrics.jsonl")
        return 0
    companion.answer("ready", message, record)
    os.nice(10)  # below the training ranks
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(SystemExit(1)))
    command = companion.read_line(None)
    if command != "follow":
        run.finish(exit_code=1)
        return 0
    end, lines = follow_metrics(run, companion, os.path.join(run_dir, "metrics.jsonl"), start.get("metrics_offset", 0))
    finish_wandb(run, read_results(run_dir) if end in ("completed", "stopped") else None, lines, end)
    return 0


def cli(argv=None):
    parser = argparse.ArgumentParser(prog="mpibert-report", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="tracker", required=True)
    mlflow_parser = sub.add_parser("mlflow", help="send a run directory to MLflow (MLFLOW_TRACKING_URI)")
    mlflow_parser.add_argument("run_dir")
    mlflow_parser.add_argument("--run-id", help="the MLflow run to send to (default: MLFLOW_RUN_ID, the run recorded "
                                                "for this server in RUN/report.json, else a new run)")
    wandb_parser = sub.add_parser("wandb", help="a run directory as a W&B run (WANDB_MODE=offline for wandb sync)")
    wandb_parser.add_argument("run_dir")
    wandb_parser.add_argument("--follow", action="store_true",
                              help="mpibert train's companion: follow the run as it trains (the protocol on stdin/stdout)")
    args = parser.parse_args(argv)
    try:
        if args.tracker == "mlflow":
            send_mlflow(args.run_dir, args.run_id)
            return 0
        return report_wandb(args.run_dir, args.follow)
    except Refusal as e:
        print(f"mpibert-report: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(cli())
