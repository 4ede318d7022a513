"""Tests of tools/mpibert_tools/run_sources.py (the readers of mpibert, HF Trainer and Lightning run
directories) and of compare.py's table arithmetic (speedups, labels, stated ranks), on small run
directories written here and on the committed reference runs.

Run from this directory, with a Python that has the package's dependencies (tools/pyproject.toml;
the project's .venv has them):  ../../.venv/bin/python3 -m unittest test_run_sources
"""

import json
import os
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))

from mpibert_tools import compare  # noqa: E402
from mpibert_tools.run_sources import RunError, memory_per_rank, num, read_run  # noqa: E402

REFERENCE = os.path.join(ROOT, "results", "reference")
MIB = 1024 * 1024


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def mpibert_results(world_size=2, strategy="ddp", step_rate=40.0, **extra):
    """A results.json as mpibert writes it, with the fields the readers look at."""
    results = {
        "train_runtime": 100.0, "train_samples_per_second": 30.0,
        "train_step_samples_per_second": step_rate, "epoch": 0.5, "global_step": 20,
        "eval_exact_match": 12.5, "eval_f1": 20.25, "eval_loss": 3.5,
        "parameters": {"global_batch_size": 24},
        "parallel": {"world_size": world_size, "strategy": strategy, "communication": "mpi"},
        "environment": {"host": "box", "devices": {"type": "cpu"}, "cpu_model": "Xeon"},
        "phase_seconds": {"forward": 10.0, "backward": 20.0},
    }
    results.update(extra)
    return results


class Numbers(unittest.TestCase):
    def test_num_takes_finite_numbers_and_numeric_strings_only(self):
        self.assertEqual(num(3), 3.0)
        self.assertEqual(num("2.5"), 2.5)
        for missing in (None, True, "n/a", float("nan"), float("inf"), [1]):
            self.assertIsNone(num(missing), missing)


class MpibertRuns(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.run_dir = os.path.join(self.tmp.name, "r2-ddp")

    def tearDown(self):
        self.tmp.cleanup()

    def test_figures_and_points_from_results_and_metrics(self):
        write(os.path.join(self.run_dir, "results.json"), json.dumps(mpibert_results()))
        lines = [{"step": 10, "loss": 4.0}, {"step": 20, "loss": 3.0},
                 {"step": 20, "eval_loss": 3.5, "eval_f1": 20.25, "epoch": 0.5}]
        # A line cut short (a preempted job) is skipped and said so, not fatal.
        write(os.path.join(self.run_dir, "metrics.jsonl"),
              "\n".join(json.dumps(line) for line in lines) + '\n{"step": 21, "lo')
        run = read_run(self.run_dir, 0)
        self.assertEqual((run.source, run.ranks, run.strategy, run.communication), ("mpibert", 2, "ddp", "mpi"))
        self.assertEqual(run.device(), "cpu (Xeon) @ box")
        self.assertEqual((run.em, run.f1, run.eval_loss, run.global_batch), (12.5, 20.25, 3.5, 24.0))
        self.assertEqual(run.samples_per_second, 40.0)
        self.assertEqual(run.train_points, {10.0: 4.0, 20.0: 3.0})
        self.assertEqual((run.eval_points, run.eval_epochs), ({20.0: 3.5}, {20.0: 0.5}))
        self.assertIn("skipped 1 malformed line(s) of metrics.jsonl", run.notes)
        lacking = [figure for figure, _ in run.lacking]
        self.assertEqual(lacking, ["padding", "steady samples/s", "memory per rank", "MFU"])

    def test_steady_throughput_and_padding(self):
        write(os.path.join(self.run_dir, "results.json"), json.dumps(mpibert_results(
            train_steady_samples_per_second=45.5, steady_after_steps=10, parameters={"padding": "dynamic"})))
        run = read_run(self.run_dir, 0)
        self.assertEqual((run.steady_samples_per_second, run.steady_after, run.padding), (45.5, 10, "dynamic"))
        self.assertNotIn("steady samples/s", [figure for figure, _ in run.lacking])
        rows = compare.markdown_table([run]).splitlines()
        cells = [c.strip() for c in rows[2].strip("|").split("|")]
        header = [c.strip() for c in rows[0].strip("|").split("|")]
        self.assertEqual((cells[header.index("padding")], cells[header.index("steady samples/s")],
                          cells[header.index("samples/s")]), ("dynamic", "45.50", "40.00"))
        self.assertIn("after the first 10", compare.baseline_note(run, [run]))

    def test_no_steady_throughput_without_a_step_after_the_warm_up(self):
        # mpibert writes 0 where every step was a warm-up step.
        write(os.path.join(self.run_dir, "results.json"), json.dumps(mpibert_results(
            train_steady_samples_per_second=0.0, steady_after_steps=10)))
        run = read_run(self.run_dir, 0)
        self.assertIsNone(run.steady_samples_per_second)
        self.assertIn(("steady samples/s", "no step after the first 10, the warm-up it leaves out"), run.lacking)

    def test_the_model_is_named_by_results_json_or_its_config(self):
        write(os.path.join(self.run_dir, "results.json"),
              json.dumps(mpibert_results(architecture="DistilBertForQuestionAnswering", model_type="distilbert")))
        self.assertEqual(read_run(self.run_dir, 0).model, "DistilBertForQuestionAnswering")
        # Before results.json named it: the config under parameters.model.
        older = mpibert_results()
        older["parameters"]["model"] = {"architectures": ["BertForQuestionAnswering"], "hidden_size": 128}
        write(os.path.join(self.run_dir, "results.json"), json.dumps(older))
        self.assertEqual(read_run(self.run_dir, 0).model, "BertForQuestionAnswering")
        write(os.path.join(self.run_dir, "results.json"), json.dumps(mpibert_results()))
        self.assertIsNone(read_run(self.run_dir, 0).model)
        hf = os.path.join(self.tmp.name, "hf")
        write(os.path.join(hf, "all_results.json"), json.dumps({"train_runtime": 5.0, "eval_f1": 1.0}))
        write(os.path.join(hf, "config.json"), json.dumps({"model_type": "distilbert"}))
        self.assertEqual(read_run(hf, 0).model, "distilbert")

    def test_one_rank_is_the_single_strategy(self):
        write(os.path.join(self.run_dir, "results.json"), json.dumps(mpibert_results(world_size=1, strategy=None)))
        self.assertEqual(read_run(self.run_dir, 0).strategy, "single")

    def test_mfu_needs_a_measured_rate(self):
        measured = {"mfu": 0.25, "matmul_flops_per_second": 1e12}
        write(os.path.join(self.run_dir, "results.json"), json.dumps(mpibert_results(utilization=measured)))
        self.assertEqual(read_run(self.run_dir, 0).mfu, 0.25)
        unmeasured = {"mfu": 0.0, "matmul_flops_per_second": 0}
        write(os.path.join(self.run_dir, "results.json"), json.dumps(mpibert_results(utilization=unmeasured)))
        self.assertIsNone(read_run(self.run_dir, 0).mfu)

    def test_malformed_results_json_names_the_file(self):
        write(os.path.join(self.run_dir, "results.json"), "[1, 2]")
        with self.assertRaisesRegex(RunError, "results.json is malformed: expected a JSON object"):
            read_run(self.run_dir, 0)

    def test_a_folder_of_no_known_kind_is_refused(self):
        os.makedirs(self.run_dir)
        with self.assertRaisesRegex(RunError, "results.json is missing"):
            read_run(self.run_dir, 0)


class MemoryPerRank(unittest.TestCase):
    def test_held_is_the_largest_rank_and_peak_the_largest_over_ranks(self):
        ranks = [{"parameter_bytes": 4 * MIB, "gradient_bytes": 4 * MIB, "optimizer_state_bytes": 4 * MIB,
                  "peak_rss_bytes": 900 * MIB},
                 {"parameter_bytes": 4 * MIB, "gradient_bytes": 2 * MIB, "optimizer_state_bytes": 4 * MIB,
                  "peak_rss_bytes": 1000 * MIB}]
        memory = memory_per_rank(ranks)
        self.assertEqual((memory.held_total, memory.peak, memory.peak_kind, memory.ranks),
                         (12 * MIB, 1000 * MIB, "RSS", 2))

    def test_a_rank_without_a_kind_makes_it_unrecorded(self):
        self.assertIsNone(memory_per_rank([{"parameter_bytes": 1, "gradient_bytes": 1}]))


class OtherSources(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.tmp.cleanup()

    def test_hf_trainer_output_dir(self):
        path = os.path.join(self.tmp.name, "hf")
        write(os.path.join(path, "all_results.json"),
              json.dumps({"train_runtime": 50.0, "train_samples_per_second": 8.0, "eval_f1": 40.0,
                          "eval_exact_match": 30.0, "epoch": 0.5}))
        write(os.path.join(path, "trainer_state.json"),
              json.dumps({"global_step": 10, "log_history": [{"step": 5, "loss": 2.0}, {"step": 10, "loss": 1.5}]}))
        run = read_run(path, 0)
        self.assertEqual((run.source, run.ranks, run.f1, run.runtime_samples_per_second), ("HF Trainer", None, 40.0, 8.0))
        self.assertIsNone(run.step_samples_per_second)  # HF does not time the steps alone
        self.assertEqual(run.train_points, {5.0: 2.0, 10.0: 1.5})
        self.assertIn("ranks", [figure for figure, _ in run.lacking])

    def test_lightning_newest_version_and_throughput(self):
        path = os.path.join(self.tmp.name, "lightning")
        write(os.path.join(path, "version_0", "metrics.csv"), "step,train_loss\n0,9.0\n")
        write(os.path.join(path, "version_1", "metrics.csv"),
              "step,epoch,train_loss,val_loss,train/time,train/samples\n"
              "0,0,5.0,,,\n1,0,4.0,,10.0,200\n1,0,,3.0,,\n")
        run = read_run(path, 0)
        self.assertEqual(run.source, "Lightning")
        self.assertIn("read version_1, the newest of its versions", run.notes)
        self.assertEqual((run.train_points, run.eval_points), ({0.0: 5.0, 1.0: 4.0}, {1.0: 3.0}))
        self.assertEqual((run.step_samples_per_second, run.global_step), (20.0, 2.0))


class Speedups(unittest.TestCase):
    """compare's arithmetic on the committed reference runs (results/reference)."""

    def read(self, *names):
        return [read_run(os.path.join(REFERENCE, name), i) for i, name in enumerate(names)]

    def test_speedup_and_efficiency_over_the_steps(self):
        baseline, ddp = self.read("cpu-1rank-2threads", "cpu-2ranks-ddp")
        compare.set_speedups([baseline, ddp], baseline)
        self.assertEqual(ddp.speedup_basis, "steps")
        self.assertAlmostEqual(ddp.speedup, ddp.step_samples_per_second / baseline.step_samples_per_second)
        self.assertAlmostEqual(ddp.efficiency, ddp.speedup / 2)
        self.assertEqual(compare.fmt_num(ddp.speedup, 2), "1.19")  # as results/reference/table.md

    def test_speedup_falls_back_to_train_runtime(self):
        baseline, ddp = self.read("cpu-1rank-2threads", "cpu-2ranks-ddp")
        baseline.step_samples_per_second = None  # as an HF Trainer baseline
        compare.set_speedups([baseline, ddp], baseline)
        self.assertEqual(ddp.speedup_basis, "runtime")
        self.assertAlmostEqual(ddp.speedup, ddp.runtime_samples_per_second / baseline.runtime_samples_per_second)

    def test_no_speedup_across_kinds_of_device(self):
        baseline, ddp = self.read("cpu-1rank-2threads", "cpu-2ranks-ddp")
        gpu = read_run(os.path.join(ROOT, "results", "gpu-check", "2026-11-26-h200", "runs", "call3-bert-packed"), 2)
        runs = [baseline, ddp, gpu]
        compare.unique_labels(runs)
        compare.set_speedups(runs, baseline)
        self.assertIsNotNone(ddp.speedup)  # the same CPU model
        self.assertIsNone(gpu.speedup)
        self.assertIsNone(gpu.efficiency)
        self.assertTrue(any("no speedup against the baseline: it ran on gpu (NVIDIA H200), `cpu-1rank-2threads` "
                            "on cpu (Intel(R) Xeon(R) Processor)" in note for note in gpu.notes), gpu.notes)
        # Against a GPU baseline, the CPU runs get none, and two GPU models none either.
        compare.set_speedups(runs, gpu)
        self.assertEqual((baseline.speedup is None, gpu.speedup), (True, 1.0))
        other = read_run(os.path.join(ROOT, "results", "gpu-check", "2026-11-26-h200", "runs", "call3-bert-full"), 3)
        other.device_kind = ("gpu", "NVIDIA A100-SXM4-80GB")
        other.label = "a100"
        compare.set_speedups([gpu, other], gpu)
        self.assertIsNone(other.speedup)
        # A run that records no device (HF's files) still gets one: nothing says the kinds differ.
        other.device_kind = None
        other.notes = []
        compare.set_speedups([gpu, other], gpu)
        self.assertIsNotNone(other.speedup)

    def test_runs_of_the_same_name_get_their_parent_in_the_label(self):
        runs = self.read("cpu-2ranks-ddp", "cpu-2ranks-ddp")
        runs[1].dir = os.path.join("/elsewhere", "cpu-2ranks-ddp")
        compare.unique_labels(runs)
        self.assertEqual([r.label for r in runs], ["reference/cpu-2ranks-ddp", "elsewhere/cpu-2ranks-ddp"])

    def test_stated_ranks_must_name_a_given_run(self):
        runs = self.read("cpu-2ranks-ddp")
        with self.assertRaisesRegex(RunError, "is not one of the runs given"):
            compare.apply_stated(runs, ["/nowhere=2"], [])
        compare.apply_stated(runs, [os.path.join(REFERENCE, "cpu-2ranks-ddp") + "=4"], [])
        self.assertEqual(runs[0].ranks, 4)


if __name__ == "__main__":
    unittest.main()
