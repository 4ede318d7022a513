"""`mpibert train --report-to mlflow|wandb` and `mpibert-report` end to end, on tiny runs of the
fixture model (ctest report.mlflow, report.wandb).

MLflow: a real tracking server of the mlflow package (sqlite store, 127.0.0.1, a free port) started
here. A 2-rank run reports one run whose parameters, tags and metric history are the run's
(report.json, metrics.jsonl step for step, results.json's numbers); a resumed job continues it
(MLFLOW_RUN_ID, and without it the run recorded in report.json); the server killed mid-run leaves
training finished (exit 0, every local file complete), the end says what was not sent, and
`mpibert-report mlflow` sends the rest once the server is back; an unreachable or missing tracking
URI is refused before any step.

W&B: offline (WANDB_MODE=offline), the run directory W&B's SDK writes is read back with the SDK's own
reader (`wandb leet inspect --json`): the run's config and history are report.json's parameters and
metrics.jsonl's lines under HF's names; WANDB_API_KEY appears in no file of the run directory and
nowhere in the job's output; `mpibert-report wandb` makes the same run afterwards.

Runs under MPIBERT_TOOLS_PYTHON (mlflow, wandb: scripts/install-deps.sh); MPIBERT_BIN_DIR, MPIEXEC.
"""
import json
import os
import pathlib
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parents[1]
BIN = pathlib.Path(os.environ.get("MPIBERT_BIN_DIR", ROOT / "build" / "bin"))
MPIEXEC = os.environ.get("MPIEXEC", "mpiexec")
PYTHON = os.environ.get("MPIBERT_TOOLS_PYTHON", sys.executable)
FIXTURES = pathlib.Path(os.environ.get("MPIBERT_FIXTURES", ROOT / "tests" / "fixtures"))
VOCAB = ROOT / "data_prep" / "data" / "bert-base-uncased" / "vocab.txt"
SQUAD = ROOT / "data_prep" / "data" / "squad" / "dev-v1.1.json.gz"
TRACKER_VARIABLES = [name for name in os.environ if name.startswith(("MLFLOW_", "WANDB_"))]


def run(command, env=None, timeout=300, check=True):
    result = subprocess.run([str(c) for c in command], env=env, capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, command))}: exit {result.returncode}\n{result.stdout}\n{result.stderr}")
    return result


def environment(**variables):
    """This process's environment without any tracker's variables, the tools' Python for the
    companion (tools/report), and `variables`."""
    env = {key: value for key, value in os.environ.items() if key not in TRACKER_VARIABLES}
    env.update({"MPIBERT_TOOLS_PYTHON": PYTHON, "OMP_NUM_THREADS": "1", "OMPI_ALLOW_RUN_AS_ROOT": "1",
                "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", "OMPI_MCA_rmaps_base_oversubscribe": "1",
                "OMPI_MCA_btl_vader_single_copy_mechanism": "none"})
    env.update(variables)
    return env


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Shards:
    """Training and evaluation shards of two SQuAD dev articles, made once."""
    directory = None

    @classmethod
    def make(cls):
        if cls.directory:
            return cls.directory
        cls.directory = pathlib.Path(tempfile.mkdtemp(prefix="test_report_shards."))
        for split, articles in (("train", "2:3"), ("eval", "32:33")):
            run([BIN / "mpibert-prep", "split", SQUAD, "--articles", articles, "--out", cls.directory / f"{split}.json"])
            run([BIN / "mpibert-prep", "--input", cls.directory / f"{split}.json", "--out", cls.directory / split,
                 "--split", split, "--vocab", VOCAB, "--max-seq-length", "128", "--doc-stride", "64", "--log-level", "warn"])
        return cls.directory


def tearDownModule():
    if Shards.directory:
        shutil.rmtree(Shards.directory, ignore_errors=True)


def train(out, *options, ranks=1, env=None, check=True, timeout=300):
    shards = Shards.make()
    command = [BIN / "mpibert", "train", "--train-shards", shards / "train", "--eval-shards", shards / "eval",
               "--model-config", FIXTURES / "model" / "config.json", "--vocab", VOCAB, "--output-dir", out,
               "--batch-size", "4", "--eval-batch-size", "32", "--learning-rate", "1e-3", "--logging-steps", "1",
               "--threads", "1", "--log-level", "info", *options]
    if ranks > 1:
        command = [MPIEXEC, "--oversubscribe", "--bind-to", "none", "-n", str(ranks)] + command
    return run(command, env=env, check=check, timeout=timeout)


def metrics_lines(out):
    """metrics.jsonl, the last line of each step and kind (a resumed job logs its steps again)."""
    lines = {}
    for text in (pathlib.Path(out) / "metrics.jsonl").read_text().splitlines():
        line = json.loads(text)
        lines[(line["step"], any(key.startswith("eval_") for key in line))] = line
    return [lines[key] for key in sorted(lines)]


def report(out):
    return json.loads((pathlib.Path(out) / "report.json").read_text())


class MlflowServer:
    """`mlflow server` on 127.0.0.1 with a sqlite store in `directory`, in a process group of its own."""

    def __init__(self, directory, port=None):
        self.directory, self.port = pathlib.Path(directory), port or free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.log = open(self.directory / f"server-{self.port}.log", "a")
        self.process = subprocess.Popen(
            [PYTHON, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{self.directory}/mlflow.db",
             "--default-artifact-root", str(self.directory / "artifacts"), "--host", "127.0.0.1",
             "--port", str(self.port), "--workers", "1"],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True, env=environment())
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(self.uri + "/health", timeout=2) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                time.sleep(0.3)
            if self.process.poll() is not None:
                break
        self.kill()
        raise AssertionError(f"mlflow server did not start: {(self.directory / f'server-{self.port}.log').read_text()}")

    def kill(self):
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        self.log.close()


class MlflowReporting(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        from mlflow.tracking import MlflowClient
        cls.tmp = pathlib.Path(tempfile.mkdtemp(prefix="test_report_mlflow."))
        cls.server = MlflowServer(cls.tmp)
        cls.client = MlflowClient(cls.server.uri)

    @classmethod
    def tearDownClass(cls):
        cls.server.kill()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def env(self, experiment, **variables):
        return environment(MLFLOW_TRACKING_URI=self.server.uri, MLFLOW_EXPERIMENT_NAME=experiment, **variables)

    def assert_history_is_the_run(self, client, out, run_id):
        """Every metric of metrics.jsonl's lines, step for step, and results.json's numbers at the last step."""
        lines = metrics_lines(out)
        keys = {key for line in lines for key, value in line.items() if key != "step" and isinstance(value, (int, float))}
        self.assertGreaterEqual(len(keys), 7)
        for key in sorted(keys):
            want = sorted((line["step"], float(line[key])) for line in lines if key in line)
            got = sorted((metric.step, metric.value) for metric in client.get_metric_history(run_id, key))
            self.assertEqual(got, want, key)
        results = json.loads((pathlib.Path(out) / "results.json").read_text())
        for key in ("train_runtime", "train_loss", "total_flos", "train_samples_per_second"):
            # Each job's at its last step (a job stopped to be resumed ends too), the run's end last.
            got = sorted((metric.step, metric.value) for metric in client.get_metric_history(run_id, key))
            self.assertEqual(got[-1], (results["global_step"], results[key]), key)
            self.assertEqual(len(got), len({metric[0] for metric in got}), key)

    def test_a_two_rank_run_is_one_mlflow_run_with_its_parameters_and_history(self):
        out = self.tmp / "two-ranks"
        result = train(out, "--max-steps", "4", "--eval-steps", "2", "--report-to", "tensorboard,mlflow", ranks=2,
                       env=self.env("two-ranks", MLFLOW_TAGS='{"team": "qa"}'))
        self.assertIn("mlflow: run ", result.stdout + result.stderr)
        recorded = report(out)["trackers"]["mlflow"]
        self.assertEqual(recorded["tracking_uri"], self.server.uri)
        self.assertEqual(recorded["unsent_values"], 0)
        experiment = self.client.get_experiment_by_name("two-ranks")
        runs = self.client.search_runs([experiment.experiment_id])
        self.assertEqual([r.info.run_id for r in runs], [recorded["run_id"]])
        mlflow_run = runs[0]
        self.assertEqual(mlflow_run.info.status, "FINISHED")
        self.assertEqual(mlflow_run.info.run_name, "two-ranks")
        params, tags = mlflow_run.data.params, mlflow_run.data.tags
        # Every option under HF's name, what it resolved to, the model's config: report.json's.
        expected = {key: value if isinstance(value, str) else json.dumps(value)
                    for key, value in report(out)["params"].items()}
        as_values = lambda texts: {key: json.loads(value) if value.startswith(("[", "{")) else value
                                   for key, value in texts.items()}
        self.assertEqual(as_values(params), as_values(expected))
        self.assertEqual(params["learning_rate"], "0.001")
        self.assertEqual(params["per_device_train_batch_size"], "4")
        self.assertEqual(params["num_train_epochs"], "2.0")
        self.assertEqual(params["max_steps"], "4")
        self.assertEqual(params["hidden_size"], "64")  # the model's config
        self.assertEqual(params["world_size"], "2")
        self.assertEqual(json.loads(params["report_to"]), ["tensorboard", "mlflow"])
        for key, value in {"model_type": "bert", "architecture": "BertForQuestionAnswering", "strategy": "ddp",
                           "world_size": "2", "device": "cpu", "team": "qa", "mlflow.runName": "two-ranks"}.items():
            self.assertEqual(tags.get(key), value, key)
        self.assert_history_is_the_run(self.client, out, recorded["run_id"])
        self.assertTrue(list((out / "tensorboard").glob("events.out.tfevents.*")))

    def test_a_resumed_job_continues_its_run(self):
        out = self.tmp / "resumed"
        env = self.env("resumed")
        train(out, "--max-steps", "6", "--stop-after-steps", "2", "--report-to", "mlflow", env=env)
        run_id = report(out)["trackers"]["mlflow"]["run_id"]
        self.assertEqual(self.client.get_run(run_id).info.status, "KILLED")
        # MLFLOW_RUN_ID names it, as HF's integration continues a run.
        train(out, "--max-steps", "6", "--stop-after-steps", "2", "--resume", "auto", "--report-to", "mlflow",
              env=self.env("resumed", MLFLOW_RUN_ID=run_id))
        # Without it, the run report.json recorded is continued.
        result = train(out, "--max-steps", "6", "--resume", "auto", "--report-to", "mlflow", env=env)
        self.assertIn(f"mlflow: continuing run {run_id}", result.stdout + result.stderr)
        experiment = self.client.get_experiment_by_name("resumed")
        self.assertEqual([r.info.run_id for r in self.client.search_runs([experiment.experiment_id])], [run_id])
        self.assertEqual(self.client.get_run(run_id).info.status, "FINISHED")
        self.assertEqual(sorted({line["step"] for line in metrics_lines(out)}), [1, 2, 3, 4, 5, 6])
        self.assert_history_is_the_run(self.client, out, run_id)

    def test_a_nested_run_goes_under_its_parent(self):
        experiment = self.client.create_experiment("nested")
        parent = self.client.create_run(experiment, run_name="sweep").info.run_id
        out = self.tmp / "nested"
        train(out, "--max-steps", "1", "--report-to", "mlflow", "--run-name", "trial-1",
              env=environment(MLFLOW_TRACKING_URI=self.server.uri, MLFLOW_RUN_ID=parent, MLFLOW_NESTED_RUN="true"))
        child = self.client.get_run(report(out)["trackers"]["mlflow"]["run_id"])
        self.assertNotEqual(child.info.run_id, parent)
        self.assertEqual(child.info.experiment_id, experiment)
        self.assertEqual(child.data.tags["mlflow.parentRunId"], parent)
        self.assertEqual(child.info.run_name, "trial-1")
        self.assertEqual(self.client.get_run(parent).data.params, {})  # the parent is left as it was

    def test_a_server_lost_mid_run_costs_the_run_nothing_and_the_rest_is_sent_later(self):
        from mlflow.tracking import MlflowClient
        directory = self.tmp / "lost"
        directory.mkdir()
        server = MlflowServer(directory)
        client = MlflowClient(server.uri)
        out = directory / "run"
        env = environment(MLFLOW_TRACKING_URI=server.uri, MLFLOW_EXPERIMENT_NAME="lost")
        job = subprocess.Popen([str(c) for c in [
            BIN / "mpibert", "train", "--train-shards", Shards.make() / "train", "--model-config",
            FIXTURES / "model" / "config.json", "--vocab", VOCAB, "--output-dir", out, "--batch-size", "4",
            "--logging-steps", "1", "--threads", "1", "--max-steps", "120", "--report-to", "tensorboard,mlflow"]],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            # The server goes once it holds the first steps, while the job trains.
            deadline = time.time() + 120
            while time.time() < deadline and job.poll() is None:
                time.sleep(0.2)
                if not (out / "report.json").exists():
                    continue
                run_id = report(out)["trackers"]["mlflow"]["run_id"]
                if len(client.get_metric_history(run_id, "loss")) >= 3:
                    break
            self.assertIsNone(job.poll(), "the job ended before the server could be killed mid-run")
            server.kill()
            output, _ = job.communicate(timeout=300)
        finally:
            if job.poll() is None:
                job.kill()
        self.assertEqual(job.returncode, 0, output)
        # The local files are complete.
        self.assertEqual([line["step"] for line in metrics_lines(out)], list(range(1, 121)))
        results = json.loads((out / "results.json").read_text())
        self.assertEqual(results["global_step"], 120)
        self.assertTrue(list((out / "tensorboard").glob("events.out.tfevents.*")))
        self.assertIn("metric values not sent", output)
        self.assertIn(f"mpibert-report mlflow {out}", output)
        recorded = report(out)["trackers"]["mlflow"]
        self.assertGreater(recorded["unsent_values"], 0)
        self.assertEqual(report(out)["end"], "completed")
        # The server back on its port with its store: mpibert-report sends the rest to the same run.
        server = MlflowServer(directory, server.port)
        try:
            sent = run([ROOT / "tools" / "report", "mlflow", out], env=env)
            self.assertIn(f"run {recorded['run_id']}", sent.stdout)
            self.assertEqual(client.get_run(recorded["run_id"]).info.status, "FINISHED")
            self.assert_history_is_the_run(client, out, recorded["run_id"])
            self.assertEqual(report(out)["trackers"]["mlflow"]["unsent_values"], 0)
            again = run([ROOT / "tools" / "report", "mlflow", out], env=env)  # nothing twice
            self.assertIn("0 parameters, 0 of", again.stdout)
            self.assert_history_is_the_run(client, out, recorded["run_id"])
        finally:
            server.kill()

    def test_a_tracker_that_cannot_be_reached_is_refused_before_any_step(self):
        port = free_port()
        out = self.tmp / "unreachable"
        result = train(out, "--max-steps", "2", "--report-to", "mlflow", ranks=2,
                       env=environment(MLFLOW_TRACKING_URI=f"http://127.0.0.1:{port}"), check=False)
        output = result.stdout + result.stderr
        self.assertNotEqual(result.returncode, 0)
        self.assertIn(f"--report-to mlflow: the tracking server http://127.0.0.1:{port} (MLFLOW_TRACKING_URI) cannot "
                      "be reached", output)
        self.assertFalse((out / "metrics.jsonl").exists())
        self.assertFalse(out.exists(), "the refused run made its directory")
        result = train(out, "--max-steps", "2", "--report-to", "mlflow", env=environment(), check=False)
        self.assertEqual(result.returncode, 1)
        self.assertIn("--report-to mlflow: MLFLOW_TRACKING_URI is not set", result.stdout + result.stderr)
        self.assertFalse(out.exists())
        # HF's switches: naming the tracker they turn off is refused, `all` leaves it out.
        result = train(out, "--max-steps", "2", "--report-to", "mlflow", check=False,
                       env=environment(MLFLOW_TRACKING_URI=self.server.uri, DISABLE_MLFLOW_INTEGRATION="TRUE"))
        self.assertEqual(result.returncode, 1)
        self.assertIn("--report-to mlflow: DISABLE_MLFLOW_INTEGRATION is set", result.stdout + result.stderr)
        self.assertFalse(out.exists())
        result = train(out, "--max-steps", "1", "--report-to", "all", env=environment(
            MLFLOW_TRACKING_URI=self.server.uri, DISABLE_MLFLOW_INTEGRATION="true", WANDB_DISABLED="true"))
        output = result.stdout + result.stderr
        self.assertIn("--report-to all: not reporting to mlflow: DISABLE_MLFLOW_INTEGRATION is set", output)
        self.assertIn("--report-to all: not reporting to wandb: WANDB_DISABLED is set", output)
        self.assertEqual(report(out)["trackers"], {})
        self.assertTrue(list((out / "tensorboard").glob("events.out.tfevents.*")))


def inspect(offline_dir, *options):
    """The records of an offline W&B run as the SDK's own reader gives them (`wandb leet inspect --json`),
    or with --summary its state and summary."""
    wandb = pathlib.Path(PYTHON).parent / "wandb"
    result = run([wandb if wandb.exists() else "wandb", "leet", "inspect", "--json", *options, offline_dir],
                 env=environment())
    if options:
        return json.loads(result.stdout)
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


class WandbReporting(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = pathlib.Path(tempfile.mkdtemp(prefix="test_report_wandb."))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def assert_offline_run_is_the_run(self, out, offline_dir):
        records = inspect(offline_dir)
        runs = [r["run"] for r in records if r["type"] == "run"]
        self.assertTrue(runs)
        config = runs[0]["config"]["update"]
        config.pop("_wandb", None)
        self.assertEqual(config, report(out)["params"])
        self.assertEqual(runs[0]["display_name"], out.name)
        self.assertIn("strategy:ddp", runs[0]["tags"])
        history = [r["history"]["item"] for r in records if r["type"] == "history"]
        lines = metrics_lines(out)
        self.assertEqual(len(history), len(lines))
        for line, item in zip(lines, history):
            logged = {key: value for key, value in item.items() if not key.startswith("_")}
            expected = {("eval/" + key[5:] if key.startswith("eval_") else "train/" + key): value
                        for key, value in line.items() if key != "step"}
            expected["train/global_step"] = line["step"]
            self.assertEqual(logged, expected)
        state = inspect(offline_dir, "--summary")
        self.assertEqual((state["state"], state["exit_code"]), ("finished", 0))
        results = json.loads((out / "results.json").read_text())
        for key in ("train_runtime", "train_loss", "total_flos"):  # the end's numbers, as HF's summary holds them
            self.assertEqual(state["summary"][key], results[key], key)

    def test_an_offline_run_holds_the_config_and_history_and_never_the_key(self):
        key = secrets.token_hex(20)
        out = self.tmp / "offline"
        env = environment(WANDB_MODE="offline", WANDB_API_KEY=key, WANDB_PROJECT="mpibert-test")
        result = train(out, "--max-steps", "4", "--eval-steps", "2", "--report-to", "wandb,tensorboard", ranks=2, env=env)
        output = result.stdout + result.stderr
        recorded = report(out)["trackers"]["wandb"]
        self.assertEqual((recorded["mode"], recorded["project"], recorded["companion_exit_status"]),
                         ("offline", "mpibert-test", 0))
        offline_dir = pathlib.Path(recorded["dir"])
        self.assertEqual(offline_dir.parent, out / "wandb")  # WANDB_DIR unset: inside the run directory
        self.assert_offline_run_is_the_run(out, offline_dir)
        # Afterwards, from the run directory alone: a second W&B run with the same history.
        later = run([ROOT / "tools" / "report", "wandb", out], env=env)
        output += later.stdout + later.stderr
        second = pathlib.Path(report(out)["trackers"]["wandb"]["dir"])
        self.assertNotEqual(second, offline_dir)
        self.assert_offline_run_is_the_run(out, second)
        for path in out.rglob("*"):
            if path.is_file():
                self.assertNotIn(key.encode(), path.read_bytes(), path)
        self.assertNotIn(key, output)

    def test_a_resumed_job_continues_its_offline_run(self):
        out = self.tmp / "resumed"
        env = environment(WANDB_MODE="offline", WANDB_PROJECT="mpibert-test")
        train(out, "--max-steps", "4", "--stop-after-steps", "2", "--report-to", "wandb", env=env)
        first = report(out)["trackers"]["wandb"]
        train(out, "--max-steps", "4", "--resume", "auto", "--report-to", "wandb", env=env)
        second = report(out)["trackers"]["wandb"]
        self.assertEqual(second["run_id"], first["run_id"])
        steps = [r["history"]["item"]["train/global_step"] for d in (first["dir"], second["dir"])
                 for r in inspect(d) if r["type"] == "history"]
        self.assertEqual(steps, [line["step"] for line in metrics_lines(out)])  # 1, 2; 3, 4 and the evaluation at 4

    def test_a_companion_that_cannot_report_refuses_the_run(self):
        out = self.tmp / "no-companion"
        result = train(out, "--max-steps", "2", "--report-to", "wandb", check=False,
                       env=environment(MPIBERT_REPORT="/nonexistent/mpibert-report"))
        self.assertEqual(result.returncode, 1)
        self.assertIn("--report-to wandb: cannot start the companion: /nonexistent/mpibert-report", result.stderr)
        self.assertFalse((out / "metrics.jsonl").exists())


if __name__ == "__main__":
    unittest.main()
