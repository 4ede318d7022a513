"""Tests of results/scaling_model/scaling_model.py (the alpha-beta model of mpibert's step).

Run from this directory:  /usr/bin/python3 -m unittest test_scaling_model
"""

import json
import os
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "results", "scaling_model"))

import scaling_model as m  # noqa: E402

SMALL = os.path.join(ROOT, "configs", "small-bert.json")
MIB = 1024 * 1024


class RingFormulas(unittest.TestCase):
    def test_two_ranks_all_reduce_bytes_term_is_n_beta(self):
        # p = 2: 2(p-1)/p n beta = n beta; latency 2(p-1) alpha = 2 alpha.
        self.assertAlmostEqual(m.ring_allreduce(1000, 2, 0.0, 1e-9), 1000e-9)
        self.assertAlmostEqual(m.ring_allreduce(1000, 2, 1e-6, 1e-9), 2e-6 + 1000e-9)

    def test_reduce_scatter_plus_all_gather_equals_all_reduce(self):
        for p in (2, 3, 8, 64):
            rs = m.ring_reduce_scatter(4096, p, 3e-6, 2e-10)
            ag = m.ring_all_gather(4096, p, 3e-6, 2e-10)
            self.assertAlmostEqual(rs + ag, m.ring_allreduce(4096, p, 3e-6, 2e-10))

    def test_one_rank_costs_nothing(self):
        self.assertEqual(m.ring_allreduce(1 << 20, 1, 1.0, 1.0), 0.0)
        self.assertEqual(m.tree_allreduce(1 << 20, 1, 1.0, 1.0), 0.0)


class Buckets(unittest.TestCase):
    def setUp(self):
        self.config = m.load_config(SMALL)
        self.numels = [p.numel for p in m.parameter_list(self.config)]

    def test_small_bert_parameter_count(self):
        # 4,369,666 = mpibert's zero1 optimizer state bytes per rank on 2 ranks (17,478,664) / 4.
        self.assertEqual(sum(self.numels), 4369666)

    def test_first_bucket_at_most_one_mib_unless_one_larger_parameter(self):
        for mb in (1, 5, 25):
            buckets = m.build_buckets(self.numels, mb, 1)
            first = buckets[0]
            self.assertTrue(first.nbytes <= MIB or len(first.members) == 1)
            for bucket in buckets[1:]:
                self.assertTrue(bucket.nbytes <= mb * MIB or len(bucket.members) == 1)

    def test_reverse_order_and_every_parameter_once(self):
        buckets = m.build_buckets(self.numels, 25, 2)
        order = [k for b in buckets for k in b.members]
        self.assertEqual(order, list(reversed(range(len(self.numels)))))

    def test_25_mib_gives_two_buckets_as_mpibert_measured(self):
        # results/reference/cpu-2ranks-ddp: gradient_buckets 2, 1,765,345,064 bytes over 101 steps.
        buckets = m.build_buckets(self.numels, 25, 2)
        self.assertEqual(len(buckets), 2)
        self.assertEqual(sum(b.nbytes for b in buckets) * 101, 1765345064)

    def test_one_mib_buckets_isolate_the_word_embeddings(self):
        buckets = m.build_buckets(self.numels, 1, 2)
        self.assertEqual(len(buckets), 4)
        self.assertEqual(buckets[-1].members, [0])  # word_embeddings: last, alone, larger than 1 MiB

    def test_element_count_rounded_to_world_size(self):
        for world in (3, 7):
            for bucket in m.build_buckets(self.numels, 25, world):
                self.assertEqual(bucket.numel % world, 0)


class Timeline(unittest.TestCase):
    def test_fifo_by_hand(self):
        # ready 1, 2, 3; durations 2, 0.5, 1: bucket 0 runs 1-3, bucket 1 3-3.5, bucket 2 3.5-4.5.
        self.assertEqual(m.fifo_finish_times([1, 2, 3], [2, 0.5, 1]), [3, 3.5, 4.5])
        self.assertAlmostEqual(m.exposed_communication([1, 2, 3], [2, 0.5, 1], 3.0), 1.5)

    def test_fully_hidden(self):
        self.assertEqual(m.exposed_communication([0.1, 0.2], [0.05, 0.05], 1.0), 0.0)

    def test_ready_times_end_at_backward_end(self):
        ready = m.ready_times([1.0, 1.0, 2.0], 4.0)
        self.assertEqual(ready, [4.0, 3.0, 2.0])  # reverse order: the last parameter first


class Algorithms(unittest.TestCase):
    cluster = m.Cluster(gpus_per_node=8, nvlink_Bps=235e9, net_Bps=25e9, alpha_intra=3.4e-6,
                        alpha_inter=9.6e-6, base_latency=8.4e-6)

    def test_tree_for_small_messages_on_many_nodes(self):
        self.assertEqual(self.cluster.cost("all_reduce", 4096, 512)[1], "tree")

    def test_ring_for_large_messages_on_few_ranks(self):
        self.assertEqual(self.cluster.cost("all_reduce", 100 * MIB, 16)[1], "ring")

    def test_reduce_scatter_is_always_ring(self):
        self.assertEqual(self.cluster.cost("reduce_scatter", 4096, 512)[1], "ring")

    def test_network_limits_multi_node_bandwidth(self):
        self.assertEqual(self.cluster.bandwidth(8), 235e9)
        self.assertEqual(self.cluster.bandwidth(16), 25e9)


class Projection(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        path = os.path.join(ROOT, "results", "scaling_model", "clusters.json")
        raw = m.load_clusters(path)
        configs = {"bert-base": m.load_config(os.path.join(ROOT, "bench", "bert-base-config.json")),
                   "bert-large": m.load_config(os.path.join(ROOT, "results", "scaling_model", "bert-large-config.json"))}
        cls.projections, _ = m.run_projections(raw, configs, path)

    def test_ddp_efficiency_at_most_one(self):
        for pr in self.projections:
            self.assertLessEqual(pr.one_gpu / pr.default.step, 1 + 1e-9)

    def test_best_efficiency_at_most_one_plus_optimizer_share(self):
        # zero1 shards the optimizer, so its step may undercut one GPU's by at most the optimizer time.
        for pr in self.projections:
            self.assertLessEqual(pr.one_gpu / pr.best.step, 1.02)

    def test_ddp_step_does_not_shrink_with_more_gpus(self):
        series = {}
        for pr in self.projections:
            series.setdefault((pr.model, pr.gpu, pr.net), []).append(pr.default.step)
        for steps in series.values():
            for a, b in zip(steps, steps[1:]):
                self.assertGreaterEqual(b, a - 1e-12)


def write_bench(path, alpha, beta, p):
    """bench_allreduce-style output whose times follow the ring formulas exactly."""
    lines = [f"# mpibert bench_allreduce: backend mpi, {p} ranks, dtype float"]
    for op in ("all_reduce", "reduce_scatter", "all_gather"):
        lines += ["#", f"# {op}", "#         size        count     type       time    algbw    busbw  #wrong"]
        for size in (1024, 8192, 65536, 1 << 20, 16 << 20):
            steps, factor = m.ring_terms(op, p)
            t = steps * alpha + factor * size * beta
            lines.append(f"  {size:12d} {size // 4:12d} {'float':>8} {t * 1e6:10.1f} {1:8.2f} {1:8.2f} {0:7d}")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def write_run(directory, strategy="ddp", link=None):
    os.makedirs(directory)
    with open(SMALL) as f:
        config = json.load(f)
    results = {"global_step": 10, "train_step_seconds": 30.0,
               "phase_seconds": {"data": 0.01, "forward": 5.0, "backward": 7.0, "gradient_sync": 14.0,
                                 "optimizer": 0.3, "eval": 1.0},
               "parallel": {"world_size": 2, "strategy": strategy, "gradient_buckets": 2, "bucket_mb": 25.0,
                            "gradient_transfer_after_backward_seconds_mean": 13.0},
               "parameters": {"batch_size": 16, "model": config}}
    with open(os.path.join(directory, "results.json"), "w") as f:
        json.dump(results, f)
    with open(os.path.join(directory, "link.json"), "w") as f:
        json.dump(link or {"rate_mbit": 100, "delay_ms": 0.1, "hosts": 2, "bucket_mb": 25, "strategy": strategy}, f)


class Check(unittest.TestCase):
    alpha, beta = 50e-6, 8e-8  # 100 Mbit/s nominal: 8e-8 s per byte

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.measured = os.path.join(self.tmp.name, "measured")
        os.makedirs(self.measured)
        write_bench(os.path.join(self.measured, "allreduce-100-2r.txt"), self.alpha, self.beta, 2)

    def tearDown(self):
        self.tmp.cleanup()

    def test_fit_recovers_alpha_and_beta(self):
        fits = m.fit_link_file(os.path.join(self.measured, "allreduce-100-2r.txt"), 2)
        for link in fits.values():
            self.assertAlmostEqual(link.alpha, self.alpha, delta=1e-6)
            self.assertAlmostEqual(link.beta / self.beta, 1.0, places=3)

    def test_ddp_run_by_hand(self):
        write_run(os.path.join(self.measured, "ddp-100"))
        rows = m.write_check(self.measured, self.tmp.name, plot=False)
        self.assertEqual(len(rows), 1)
        row = rows[0]
        self.assertEqual(row.buckets_model, 2)
        # Bucket 1 (16,683,008 bytes, word embeddings included) is ready when backward ends and
        # bucket 0 (795,656 bytes) is done long before, so all of bucket 1's all-reduce is exposed:
        # p = 2: 2 alpha + n beta.
        exposed = 2 * self.alpha + 16683008 * self.beta
        self.assertAlmostEqual(row.predicted.exposed, exposed, delta=2e-4)
        compute = (0.01 + 5.0 + 7.0 + 0.3) / 10
        bookkeeping = 2 * self.alpha + 16 * self.beta
        self.assertAlmostEqual(row.predicted.step, compute + exposed + bookkeeping, delta=2e-4)
        with open(os.path.join(self.tmp.name, "check.md")) as f:
            text = f.read()
        self.assertIn("| ddp-100 | 2 | 100 | 25 | ddp | 2/2 |", text)

    def test_missing_link_key_names_the_file(self):
        write_run(os.path.join(self.measured, "bad"), link={"rate_mbit": 100, "hosts": 2})
        with self.assertRaises(m.InputError) as caught:
            m.write_check(self.measured, self.tmp.name, plot=False)
        self.assertIn("link.json", str(caught.exception))
        self.assertIn("delay_ms", str(caught.exception))

    def test_missing_bench_file_names_it(self):
        write_run(os.path.join(self.measured, "slow"), link={"rate_mbit": 1000, "delay_ms": 0.1, "hosts": 2,
                                                           "bucket_mb": 25, "strategy": "ddp"})
        with self.assertRaises(m.InputError) as caught:
            m.write_check(self.measured, self.tmp.name, plot=False)
        self.assertIn("allreduce-1000-2r.txt", str(caught.exception))

    def test_bad_bench_row_names_the_line(self):
        path = os.path.join(self.measured, "allreduce-100-2r.txt")
        with open(path, "a") as f:
            f.write("  1024 256 float abc 1 1 0\n")
        with self.assertRaises(m.InputError) as caught:
            m.parse_bench(path)
        self.assertIn("allreduce-100-2r.txt:", str(caught.exception))


if __name__ == "__main__":
    unittest.main()
