"""Tests of tools/mpibert_tools/scaling_model.py (the alpha-beta model of mpibert's step).

Run from this directory, with a Python that has the package's dependencies (tools/pyproject.toml;
the project's .venv has them):  ../../.venv/bin/python3 -m unittest test_scaling_model
"""

import dataclasses
import json
import os
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))

from mpibert_tools import scaling_model as m  # noqa: E402

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

    def test_sparse_word_embedding_is_a_last_group_of_its_own(self):
        # As mpibert's test_data_parallel TheFirstBucketIsSmall: 3 groups for the small model.
        buckets = m.build_buckets(self.numels, 25, 3, sparse_embedding=True)
        self.assertEqual(len(buckets), 3)
        self.assertEqual(buckets[-1].members, [0])
        self.assertEqual(buckets[-1].numel, -(-self.numels[0] // 3) * 3)
        order = [k for b in buckets for k in b.members]
        self.assertEqual(order, list(reversed(range(len(self.numels)))))


class LinearNetwork:
    """Every collective costs alpha + n beta."""

    def __init__(self, alpha, beta):
        self.alpha, self.beta = alpha, beta

    def cost(self, op, n, p):
        return self.alpha + n * self.beta, "ring"


class SparseEmbeddingExchange(unittest.TestCase):
    def setUp(self):
        self.config = m.load_config(SMALL)
        self.network = LinearNetwork(1e-3, 1e-8)
        self.embedding_bytes = 4 * self.config["vocab_size"] * self.config["hidden_size"]

    def step(self, rows):
        inp = m.StepInput(0.0, 1.0, 2.0, 0.1, "ddp", 2, len(m.parameter_list(self.config)), rows)
        return m.simulate(self.config, 384, inp, 25, self.network)

    def test_sends_the_mask_and_the_rows_instead_of_the_embedding(self):
        dense, sparse = self.step(None), self.step(1000)
        mask, rows = 4 * self.config["vocab_size"], 4 * 1000 * self.config["hidden_size"]
        self.assertAlmostEqual(sparse.network_bytes, dense.network_bytes - self.embedding_bytes + mask + rows)
        self.assertEqual(sparse.collectives, dense.collectives + 2)  # the mask, and the embedding apart
        # The rows are ready only when backward ends: their all-reduce is exposed. Against dense, the
        # exposed time loses the bytes not sent and gains at most one latency (the rows apart).
        rows_cost = self.network.cost("all_reduce", rows, 2)[0]
        self.assertGreaterEqual(sparse.exposed, rows_cost)
        self.assertLessEqual(sparse.exposed,
                             dense.exposed - (self.embedding_bytes - rows) * self.network.beta + self.network.alpha + 1e-9)

    def test_a_union_past_the_limit_sends_the_mask_and_the_embedding(self):
        dense = self.step(None)
        over = self.step(m.SPARSE_ROWS_MAX_FRACTION * self.config["vocab_size"] + 1)
        self.assertAlmostEqual(over.network_bytes, dense.network_bytes + 4 * self.config["vocab_size"])
        self.assertGreater(over.exposed, dense.exposed - 1e-9)

    def test_other_strategies_ignore_the_rows(self):
        for strategy in ("zero1", "zero2"):
            inp = m.StepInput(0.0, 1.0, 2.0, 0.1, strategy, 2, len(m.parameter_list(self.config)), 1000)
            dense = m.StepInput(0.0, 1.0, 2.0, 0.1, strategy, 2, len(m.parameter_list(self.config)))
            self.assertEqual(m.simulate(self.config, 384, inp, 25, self.network),
                             m.simulate(self.config, 384, dense, 25, self.network))


class WireDtype(unittest.TestCase):
    """--reduce-dtype bf16 halves every gradient reduction; --param-dtype bf16 fsdp's gathers."""

    def setUp(self):
        self.config = m.load_config(SMALL)
        self.network = m.Link(1e-3, 1e-8)  # the ring formulas: nothing on one rank
        self.tensors = len(m.parameter_list(self.config))

    def step(self, strategy, rows=None, reduce="fp32", param="fp32", world=2, keep=False):
        inp = m.StepInput(0.0, 1.0, 2.0, 0.1, strategy, world, self.tensors, rows, reduce, param, shard_group=2,
                          keep_gathered=keep)
        return m.simulate(self.config, 384, inp, 25, self.network)

    def norm_bytes(self, world=2):
        return m.ring_bytes("all_reduce", 8 * self.tensors, world)

    def test_ddp_buckets_and_rows_halve_but_not_the_mask(self):
        fp32, bf16 = self.step("ddp"), self.step("ddp", reduce="bf16")
        self.assertEqual(bf16.buckets, fp32.buckets)  # capacity is by fp32 bytes
        self.assertAlmostEqual(bf16.network_bytes, fp32.network_bytes / 2)
        self.assertAlmostEqual(bf16.reduced_bytes, fp32.reduced_bytes / 2)
        self.assertLess(bf16.step, fp32.step)
        mask = 4 * self.config["vocab_size"]
        fp32, bf16 = self.step("ddp", 1000), self.step("ddp", 1000, "bf16")
        self.assertAlmostEqual(bf16.reduced_bytes, mask + (fp32.reduced_bytes - mask) / 2)
        self.assertAlmostEqual(fp32.reduced_bytes - bf16.reduced_bytes, 2 * 1000 * self.config["hidden_size"] +
                               (fp32.reduced_bytes - mask - 4 * 1000 * self.config["hidden_size"]) / 2)

    def test_zero_reduce_scatters_halve_but_not_the_gather_after_the_step(self):
        for strategy in ("zero1", "zero2"):
            fp32, bf16 = self.step(strategy), self.step(strategy, reduce="bf16")
            self.assertAlmostEqual(bf16.reduced_bytes, fp32.reduced_bytes / 2)
            self.assertEqual(bf16.gather, fp32.gather)  # the norm all-reduce and the fp32 all-gather
            self.assertAlmostEqual(fp32.network_bytes - bf16.network_bytes,
                                   m.ring_bytes("reduce_scatter", fp32.reduced_bytes, 2) / 2)

    def test_param_dtype_applies_to_fsdp_gathers_only(self):
        fp32 = self.step("fsdp")
        reduce = self.step("fsdp", reduce="bf16")
        both = self.step("fsdp", reduce="bf16", param="bf16")
        self.assertAlmostEqual(reduce.reduced_bytes, fp32.reduced_bytes / 2)
        self.assertEqual(both.reduced_bytes, reduce.reduced_bytes)
        self.assertAlmostEqual(both.network_bytes - self.norm_bytes(), (fp32.network_bytes - self.norm_bytes()) / 2)
        self.assertLess(both.step, reduce.step)
        self.assertLess(reduce.step, fp32.step)
        self.assertEqual(self.step("ddp", param="bf16"), self.step("ddp"))

    def test_kept_units_gather_once_a_micro_batch(self):
        kept, fsdp = self.step("fsdp", keep=True), self.step("fsdp")
        _, units = m.strategy_groups(self.config, "fsdp", 25, 2)
        backward_gathers = sum(m.ring_bytes("all_gather", u.wire_bytes("fp32"), 2) for u in units[:-1])
        self.assertAlmostEqual(fsdp.network_bytes - kept.network_bytes, backward_gathers)
        self.assertEqual(kept.reduced_bytes, fsdp.reduced_bytes)
        self.assertLess(kept.backward, fsdp.backward)
        self.assertEqual(kept.forward, fsdp.forward)

    def test_one_rank_sends_nothing_in_either_dtype(self):
        for strategy in m.STRATEGIES:
            self.assertEqual(self.step(strategy, world=1, reduce="bf16", param="bf16"), self.step(strategy, world=1))


class EmbeddingRowsTable(unittest.TestCase):
    def setUp(self):
        self.rows = m.EmbeddingRows([(8, 500.0), (16, 900.0), (32, 1600.0)], 30522)

    def test_measured_points_are_returned(self):
        for g, r in self.rows.points:
            self.assertAlmostEqual(self.rows.for_global_batch(g), r)

    def test_log_log_between_and_the_last_slope_beyond_capped_at_the_vocabulary(self):
        self.assertAlmostEqual(self.rows.for_global_batch(12), 500.0 * 1.5 ** (np_log(900 / 500) / np_log(2)))
        slope = np_log(1600 / 900) / np_log(2)
        self.assertAlmostEqual(self.rows.for_global_batch(64), 1600.0 * 2 ** slope)
        self.assertEqual(self.rows.for_global_batch(1 << 20), 30522.0)

    def test_committed_table_grows_with_the_batch(self):
        raw = m.load_clusters(os.path.join(ROOT, "results", "scaling_model", "clusters.json"))
        table = m.load_embedding_rows(raw, os.path.join(ROOT, "results", "scaling_model", "clusters.json"))
        sizes = [2 ** k for k in range(3, 15)]
        values = [table.for_global_batch(g) for g in sizes]
        self.assertEqual(values, sorted(values))
        self.assertLessEqual(values[-1], table.vocab)


def np_log(x):
    import math
    return math.log(x)


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

    def test_every_strategy_projected(self):
        for pr in self.projections:
            self.assertEqual(sorted(pr.strategies), sorted(m.STRATEGIES + ["ddp dense"]))
            self.assertLessEqual(pr.strategies["ddp"].step, pr.strategies["ddp dense"].step + 1e-12)
            self.assertEqual(pr.strategies["zero1"].step, pr.strategies["zero2"].step)
            self.assertLessEqual(pr.one_gpu / pr.strategies["fsdp"].step, 1.02)

    def test_clusters_without_memory_names_the_file(self):
        path = os.path.join(ROOT, "results", "scaling_model", "clusters.json")
        with open(path) as f:
            raw = json.load(f)
        del raw["memory"]["reserved_GiB"]
        with tempfile.TemporaryDirectory() as tmp:
            bad = os.path.join(tmp, "clusters.json")
            with open(bad, "w") as f:
                json.dump(raw, f)
            with self.assertRaises(m.InputError) as caught:
                m.load_clusters(bad)
        self.assertIn("clusters.json", str(caught.exception))
        self.assertIn("reserved_GiB", str(caught.exception))

    def test_ddp_step_does_not_shrink_with_more_gpus(self):
        series = {}
        for pr in self.projections:
            series.setdefault((pr.model, pr.gpu, pr.net), []).append(pr.default.step)
        for steps in series.values():
            for a, b in zip(steps, steps[1:]):
                self.assertGreaterEqual(b, a - 1e-12)


class ProjectionWireDtype(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        Projection.setUpClass.__func__(cls)

    def test_bf16_never_slower_and_halves_ddp_bytes(self):
        for pr in self.projections:
            self.assertEqual(sorted(pr.wire), sorted(v[0] for v in m.WIRE_VARIANTS))
            pairs = [("ddp", "ddp bf16"), ("ddp dense", "ddp dense bf16"), ("zero2", "zero2 bf16"),
                     ("fsdp", "fsdp bf16")]
            for fp32, bf16 in pairs:
                self.assertLessEqual(pr.wire[bf16].step, pr.strategies[fp32].step + 1e-12)
            self.assertLessEqual(pr.wire["fsdp bf16 gathers"].step, pr.wire["fsdp bf16"].step + 1e-12)
            self.assertAlmostEqual(pr.wire["ddp dense bf16"].network_bytes, pr.strategies["ddp dense"].network_bytes / 2)
            self.assertEqual(pr.wire["zero2 bf16"].gather, pr.strategies["zero2"].gather)

    def test_half_the_bytes_on_ib100_is_fp32_on_ib200(self):
        # Across nodes beta is the NIC's (slower than NVLink): bf16 over 100 Gbit/s = fp32 over 200, but
        # for the collectives that stay fp32 (the sample count's 16 bytes, the norm's: nanoseconds).
        for model in ("bert-base", "bert-large"):
            slow = m.find_projection(self.projections, model, "H100", "IB100", 64)
            fast = m.find_projection(self.projections, model, "H100", "IB200", 64)
            self.assertAlmostEqual(slow.wire["ddp bf16"].step, fast.strategies["ddp"].step, delta=1e-7)
            self.assertAlmostEqual(slow.wire["fsdp bf16 gathers"].step, fast.strategies["fsdp"].step, delta=2e-6)


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


def write_run(directory, strategy="ddp", link=None, phases=None, parallel=None):
    os.makedirs(directory)
    with open(SMALL) as f:
        config = json.load(f)
    results = {"global_step": 10, "train_step_seconds": 30.0,
               "phase_seconds": {"data": 0.01, "forward": 5.0, "backward": 7.0, "gradient_sync": 14.0,
                                 "optimizer": 0.3, "eval": 1.0},
               "parallel": {"world_size": 2, "strategy": strategy, "gradient_buckets": 4 if strategy == "fsdp" else 2,
                            "bucket_mb": 25.0, "gradient_transfer_after_backward_seconds_mean": 13.0},
               "parameters": {"batch_size": 16, "gradient_accumulation": 1, "model": config}}
    results["phase_seconds"].update(phases or {})
    results["parallel"].update(parallel or {})
    with open(os.path.join(directory, "results.json"), "w") as f:
        json.dump(results, f)
    with open(os.path.join(directory, "link.json"), "w") as f:
        json.dump(link or {"rate_mbit": 100, "delay_ms": 0.1, "hosts": 2, "bucket_mb": 25, "strategy": strategy}, f)


class MeasuredDirCase(unittest.TestCase):
    """A measured/ folder in a temporary directory, with a bench_allreduce file for 100 Mbit/s, 2 ranks."""
    alpha, beta = 50e-6, 8e-8  # 100 Mbit/s nominal: 8e-8 s per byte

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.measured = os.path.join(self.tmp.name, "measured")
        os.makedirs(self.measured)
        write_bench(os.path.join(self.measured, "allreduce-100-2r.txt"), self.alpha, self.beta, 2)

    def tearDown(self):
        self.tmp.cleanup()


class Check(MeasuredDirCase):

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

    def test_sparse_embedding_run_by_hand(self):
        # 1,000 rows a step: the embedding's group sends 1000 x 128 x 4 bytes, after the mask's
        # 30,522 x 4; bucket 1 (the rest, 1,055,744 bytes) and the rows come at the end of backward.
        write_run(os.path.join(self.measured, "sparse-100"),
                  parallel={"embedding_exchange": "sparse", "embedding_sparse_exchanges": 10,
                            "embedding_rows_exchanged_mean": 1000.0, "gradient_buckets": 3})
        row = m.write_check(self.measured, self.tmp.name, plot=False)[0]
        self.assertEqual(row.buckets_model, 3)
        rows_cost = 2 * self.alpha + 1000 * 128 * 4 * self.beta
        self.assertGreaterEqual(row.predicted.exposed, rows_cost - 1e-6)
        self.assertLessEqual(row.predicted.exposed, rows_cost + 2 * self.alpha + 1055744 * self.beta + 1e-6)
        self.assertAlmostEqual(row.predicted.network_bytes, 795656 + 1055744 + 4 * 30522 + 1000 * 128 * 4, delta=8)

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


class CheckWireDtype(MeasuredDirCase):
    """link.json's reduce_dtype/param_dtype (absent: fp32) and a measured-bf16/ folder of pairs."""

    def link(self, strategy="ddp", **dtypes):
        return dict({"rate_mbit": 100, "delay_ms": 0, "hosts": 2, "bucket_mb": 25, "strategy": strategy}, **dtypes)

    def test_a_bf16_run_is_predicted_with_half_the_bytes(self):
        write_run(os.path.join(self.measured, "fp32"))
        write_run(os.path.join(self.measured, "bf16"), link=self.link(reduce_dtype="bf16"),
                  parallel={"reduce_dtype": "bf16", "gradient_bytes_reduced_per_rank": 10 * 8739332})
        rows = {r.run.name: r for r in m.write_check(self.measured, self.tmp.name, plot=False)}
        self.assertEqual(rows["fp32"].run.reduce_dtype, "fp32")
        self.assertEqual(rows["bf16"].run.reduce_dtype, "bf16")
        self.assertAlmostEqual(rows["bf16"].predicted.reduced_bytes, rows["fp32"].predicted.reduced_bytes / 2)
        self.assertAlmostEqual(rows["bf16"].run.reduced_bytes, 8739332)
        # Bucket 1 (16,683,008 fp32 bytes) is exposed whole: half its bytes in bf16.
        self.assertAlmostEqual(rows["fp32"].predicted.exposed - rows["bf16"].predicted.exposed,
                               16683008 / 2 * self.beta, delta=2e-4)

    def test_results_json_must_agree_with_link_json(self):
        write_run(os.path.join(self.measured, "bad"), link=self.link(), parallel={"reduce_dtype": "bf16"})
        with self.assertRaises(m.InputError) as caught:
            m.write_check(self.measured, self.tmp.name, plot=False)
        self.assertIn("link.json", str(caught.exception))
        self.assertIn("reduce_dtype", str(caught.exception))

    def test_unknown_dtype_names_the_file(self):
        write_run(os.path.join(self.measured, "bad"), "fsdp", link=self.link("fsdp", param_dtype="fp16"))
        with self.assertRaises(m.InputError) as caught:
            m.write_check(self.measured, self.tmp.name, plot=False)
        self.assertIn("link.json", str(caught.exception))
        self.assertIn("fp16", str(caught.exception))

    def test_pairs_are_checked_with_the_measured_links(self):
        write_run(os.path.join(self.measured, "ddp-100"))
        bf16 = os.path.join(self.tmp.name, "measured-bf16")
        for name, reduce, param in (("fsdp-fp32-fp32", "fp32", "fp32"), ("fsdp-bf16-fp32", "bf16", "fp32"),
                                    ("fsdp-bf16-bf16", "bf16", "bf16")):
            write_run(os.path.join(bf16, name), "fsdp", link=self.link("fsdp", reduce_dtype=reduce, param_dtype=param),
                      parallel={"reduce_dtype": reduce, "param_dtype": param})
        write_run(os.path.join(bf16, "ddp-fp32-fp32"), link=self.link(reduce_dtype="fp32", param_dtype="fp32"))
        rows = {r.run.name: r for r in m.write_check(self.measured, self.tmp.name, plot=False, reduced_precision=bf16)}
        self.assertEqual(len(rows), 5)  # the bench file comes from measured/
        steps = [rows[f"fsdp-{v}"].predicted.step for v in ("fp32-fp32", "bf16-fp32", "bf16-bf16")]
        self.assertGreater(steps[0], steps[1])
        self.assertGreater(steps[1], steps[2])
        self.assertEqual(rows["fsdp-bf16-bf16"].compute_source, "ddp run ddp-fp32-fp32")
        with open(os.path.join(self.tmp.name, "check.md")) as f:
            text = f.read()
        self.assertIn("## Reduced-precision communication", text)
        self.assertIn("`measured/`", text)
        line = next(l for l in text.splitlines() if l.startswith("| fsdp-bf16-bf16 | bf16 / bf16 |"))
        cells = [c.strip() for c in line.split("|")[1:-1]]
        self.assertEqual(cells[7], "1.000")  # the same measured step: only the prediction moves
        self.assertEqual(cells[8], f"{steps[2] / steps[0]:.3f}")
        self.assertEqual(cells[9], f"{steps[0] - steps[2]:.3f}")  # the same compute: the dtype's saving

    def test_no_folder_leaves_the_check_as_it_was(self):
        write_run(os.path.join(self.measured, "ddp-100"))
        m.write_check(self.measured, self.tmp.name, plot=False)
        with open(os.path.join(self.tmp.name, "check.md")) as f:
            before = f.read()
        m.write_check(self.measured, self.tmp.name, plot=False, reduced_precision=os.path.join(self.tmp.name, "none"))
        with open(os.path.join(self.tmp.name, "check.md")) as f:
            self.assertEqual(f.read(), before)


class FakeNetwork:
    """Gathers and reduce-scatters take `seconds` each, all-reduces nothing."""

    def __init__(self, seconds):
        self.seconds = seconds

    def cost(self, op, n, p):
        return (0.0 if op == "all_reduce" else self.seconds), "ring"


def fsdp_input(forward=3.0, backward=6.0, optimizer=0.5, world=2, data=0.0):
    return m.StepInput(data, forward, backward, optimizer, "fsdp", world, 10)


class Fsdp(unittest.TestCase):
    def setUp(self):
        self.config = m.load_config(SMALL)
        self.params = m.parameter_list(self.config)

    def test_units_are_embeddings_layers_and_head(self):
        units = m.build_units(self.params, 3, self.config["num_hidden_layers"])
        self.assertEqual(len(units), self.config["num_hidden_layers"] + 2)
        self.assertEqual(sorted(k for u in units for k in u.members), list(range(len(self.params))))
        self.assertTrue(all(self.params[k].name.startswith("bert.embeddings.") for k in units[0].members))
        self.assertTrue(all(self.params[k].name.startswith("qa_outputs.") for k in units[-1].members))
        self.assertTrue(all(u.numel % 3 == 0 for u in units))
        self.assertEqual(sum(u.numel for u in m.build_units(self.params, 1, 2)), 4369666)

    def test_timeline_by_hand(self):
        # 3 units, every collective 1 s, forward 1 s and backward 2 s per unit.
        # Forward: G0 0-1, G1 1-2, unit 0 runs 1-2; G2 2-3, unit 1 2-3; unit 2 3-4 (waited 1 s for G0).
        # Backward from 4: unit 2 (kept) 4-6, G1 4-5, R2 6-7; unit 1 6-8, G0 7-8, R1 8-9; unit 0 8-10,
        # R0 10-11: 1 s after backward. 3U-1 = 8 collectives.
        units = [m.Bucket([k], 2) for k in range(3)]
        result = m.simulate_fsdp_step(fsdp_input(), units, [1 / 3] * 3, FakeNetwork(1.0))
        self.assertAlmostEqual(result.forward, 4.0)
        self.assertAlmostEqual(result.backward, 6.0)
        self.assertAlmostEqual(result.tail, 1.0)
        self.assertAlmostEqual(result.exposed, 2.0)
        self.assertAlmostEqual(result.step, 4.0 + 6.0 + 1.0 + 0.5)
        self.assertEqual(result.collectives, 8 + 1)  # and the norm all-reduce

    def test_free_network_costs_nothing(self):
        units = m.build_units(self.params, 2, 2)
        shares = m.group_shares(units, m.backward_costs(self.params, self.config, 384))
        result = m.simulate_fsdp_step(fsdp_input(data=0.1), units, shares, FakeNetwork(0.0))
        self.assertAlmostEqual(result.step, 0.1 + 3.0 + 6.0 + 0.5)

    def test_accumulation_communicates_every_micro_batch(self):
        units = m.build_units(self.params, 2, 2)
        shares = m.group_shares(units, m.backward_costs(self.params, self.config, 384))
        one = m.simulate_fsdp_step(fsdp_input(), units, shares, FakeNetwork(0.01), 1)
        two = m.simulate_fsdp_step(fsdp_input(), units, shares, FakeNetwork(0.01), 2)
        self.assertEqual(two.collectives - 1, 2 * (one.collectives - 1))
        self.assertGreater(two.step, one.step)

    def test_fsdp_sends_one_and_a_half_times_ddp(self):
        # ddp: 2(p-1)/p x params; fsdp: (p-1)/p x (forward gathers + backward gathers + reduce-scatters).
        base = m.load_config(os.path.join(ROOT, "bench", "bert-base-config.json"))
        network = FakeNetwork(0.0)
        results = {s: m.simulate(base, 384, m.StepInput(0, 1, 2, 0, s, 64, 200), 25, network)
                   for s in ("ddp", "zero2", "fsdp")}
        self.assertAlmostEqual(results["fsdp"].network_bytes / results["ddp"].network_bytes, 1.5, places=3)
        self.assertAlmostEqual(results["zero2"].network_bytes / results["ddp"].network_bytes, 1.0, places=3)
        self.assertEqual(results["fsdp"].collectives, 3 * 14 - 1 + 1)

    def test_zero1_and_zero2_take_the_same_time(self):
        cluster = Algorithms.cluster
        base = m.load_config(os.path.join(ROOT, "bench", "bert-base-config.json"))
        compute = m.Compute(0.02, 0.04, 0.003, 0.0)
        for p in (8, 64):
            steps = [m.project_point(base, compute, cluster, p, s, 25, 384).step for s in ("zero1", "zero2")]
            self.assertEqual(steps[0], steps[1])


class Memory(unittest.TestCase):
    def setUp(self):
        self.base = m.load_config(os.path.join(ROOT, "bench", "bert-base-config.json"))

    def test_held_between_steps_matches_results_memory(self):
        # results/memory/bert-base.md: rank 0's bytes held between steps (MiB), measured by mpibert.
        measured = {("ddp", 2): 1661.6, ("zero1", 2): 1453.9, ("zero2", 2): 1038.5, ("fsdp", 2): 830.8,
                    ("ddp", 3): 1661.6, ("zero1", 3): 1246.2, ("zero2", 3): 830.8, ("fsdp", 3): 553.9}
        for (strategy, world), mib in measured.items():
            self.assertAlmostEqual(m.held_between_steps(self.base, strategy, world, 25) / MIB, mib, delta=0.05)

    def test_zero2_peaks_a_full_gradient_below_zero1(self):
        # zero2 allocates a bucket's full gradient when its first gradient arrives: at the start of
        # backward it holds 4 bytes per parameter less than zero1, plus its buckets in flight.
        n = m.total_params(self.base)
        for p in (2, 8, 512):
            self.assertAlmostEqual(sum(m.state_bytes_per_param("zero1", p)) - sum(m.state_bytes_per_param("zero2", p)), 4.0)
            self.assertAlmostEqual(sum(m.state_bytes_per_param("fsdp", p)), 16 / p)
            (zero1_per_sample, zero1_fixed), = m.peak_memory_terms(self.base, "zero1", p, 384, "bf16")
            (zero2_per_sample, zero2_fixed), = m.peak_memory_terms(self.base, "zero2", p, 384, "bf16")
            self.assertEqual(zero1_per_sample, zero2_per_sample)
            self.assertAlmostEqual(zero1_fixed - zero2_fixed, 4 * n - m.ZERO2_BUCKETS_IN_FLIGHT)

    def test_activations_per_layer(self):
        # I = 4h: bf16 40h + 16 + 4 heads + 2 (the mask in bf16), fp32 70h + 16 + 4 heads.
        h, heads = 768, 12
        self.assertEqual(m.activation_bytes_per_token(self.base, "bf16")[1], 40 * h + 16 + 4 * heads + 2)
        self.assertEqual(m.activation_bytes_per_token(self.base, "fp32")[1], 70 * h + 16 + 4 * heads)

    def test_largest_batch_is_the_last_that_fits(self):
        usable = m.usable_memory_bytes(40, 2, 0.1)
        batches = {}
        for strategy in m.STRATEGIES:
            terms = m.peak_memory_terms(self.base, strategy, 64, 384, "bf16", group=8)
            b = m.largest_batch(terms, usable)
            self.assertLessEqual(m.peak_memory_bytes(terms, b), usable)
            self.assertGreater(m.peak_memory_bytes(terms, b + 1), usable)
            batches[strategy] = b
        self.assertLessEqual(batches["ddp"], batches["zero1"])
        self.assertLess(batches["zero1"], batches["zero2"])
        self.assertLess(batches["zero2"], batches["fsdp"])
        self.assertLess(batches["zero2"], batches["hsdp"])  # 16/8 bytes per parameter against zero2's 4 + 12/64
        self.assertLess(batches["hsdp"], batches["fsdp"])   # against fsdp's 16/64

    def test_checkpointing_keeps_layer_inputs_and_one_layer(self):
        # Per sample: embeddings + L layer inputs (4h per token) + QA head + one recomputed layer; the
        # weight copies of one layer instead of every layer's.
        h, layers, seq = 768, 12, 384
        emb, layer, head = m.activation_bytes_per_token(self.base, "bf16")
        (plain_a, plain_c), = m.peak_memory_terms(self.base, "ddp", 8, seq, "bf16")
        (ckpt_a, ckpt_c), = m.peak_memory_terms(self.base, "ddp", 8, seq, "bf16", checkpointing=True)
        self.assertEqual(plain_a, (emb + layers * layer + head) * seq)
        self.assertEqual(ckpt_a, (emb + layers * 4 * h + head + layer) * seq)
        self.assertEqual(plain_c - ckpt_c, (layers - 1) * m.saved_weight_bytes(self.base, "bf16")[1])
        usable = m.usable_memory_bytes(40, 2, 0.1)
        for strategy in m.STRATEGIES:
            without = m.largest_batch(m.peak_memory_terms(self.base, strategy, 64, seq, "bf16", group=8), usable)
            with_ = m.largest_batch(m.peak_memory_terms(self.base, strategy, 64, seq, "bf16", True, group=8), usable)
            self.assertGreater(with_, 2 * without, strategy)

    def test_nothing_fits(self):
        terms = m.peak_memory_terms(self.base, "ddp", 8, 384, "fp32")
        self.assertEqual(m.largest_batch(terms, 1e9), 0)

    def test_fsdp_peak_counts_units_in_flight(self):
        terms = m.peak_memory_terms(self.base, "fsdp", 8, 384, "bf16")
        self.assertEqual(len(terms), self.base["num_hidden_layers"] + 2)
        units = m.build_units(m.parameter_list(self.base), 8, 12)
        self.assertEqual(m.units_in_flight(units, 0), 4 * (2 * units[0].numel + units[1].numel))


class CheckNewStrategies(MeasuredDirCase):
    def rows(self):
        return {r.run.name: r for r in m.write_check(self.measured, self.tmp.name, plot=False)}

    def text(self):
        with open(os.path.join(self.tmp.name, "check.md")) as f:
            return f.read()

    def test_zero2_predicted_as_zero1(self):
        write_run(os.path.join(self.measured, "ddp"))
        write_run(os.path.join(self.measured, "zero1"), "zero1")
        write_run(os.path.join(self.measured, "zero2"), "zero2")
        rows = self.rows()
        self.assertAlmostEqual(rows["zero2"].predicted.step, rows["zero1"].predicted.step)
        self.assertEqual(rows["zero2"].optimizer_source, "ddp run ddp / p")

    def test_fsdp_takes_compute_from_the_ddp_run(self):
        write_run(os.path.join(self.measured, "ddp"))
        write_run(os.path.join(self.measured, "fsdp"), "fsdp", phases={"forward": 6.0, "backward": 8.0, "gradient_sync": 3.0})
        row = self.rows()["fsdp"]
        self.assertEqual(row.buckets_model, 4)
        self.assertEqual(row.compute_source, "ddp run ddp")
        self.assertAlmostEqual(row.exposed_measured, (6.0 + 8.0 + 3.0 - 5.0 - 7.0) / 10)
        pr = row.predicted
        self.assertGreater(pr.forward, 0.5)  # ddp's forward per step plus waits for gathers
        self.assertAlmostEqual(pr.forward + pr.backward + pr.tail - pr.exposed, 1.2)
        text = self.text()
        self.assertIn("## fsdp by phase", text)
        self.assertIn("| fsdp | 2 | 100 | 25 | fsdp | 4/4 | ", text)
        self.assertIn("No measured run of: zero1, zero2.", text)

    def test_fsdp_compute_is_the_mean_of_the_ddp_runs(self):
        write_run(os.path.join(self.measured, "ddp-a"), phases={"forward": 4.0, "backward": 6.0})
        write_run(os.path.join(self.measured, "ddp-b"), link={"rate_mbit": 100, "delay_ms": 0.1, "hosts": 2,
                                                             "bucket_mb": 1, "strategy": "ddp"},
                  phases={"forward": 6.0, "backward": 8.0}, parallel={"bucket_mb": 1.0, "gradient_buckets": 4})
        write_run(os.path.join(self.measured, "fsdp"), "fsdp", phases={"forward": 6.0, "backward": 8.0, "gradient_sync": 3.0})
        row = self.rows()["fsdp"]
        self.assertEqual(row.compute_source, "ddp runs ddp-a, ddp-b (mean)")
        self.assertAlmostEqual(row.exposed_measured, (6.0 + 8.0 + 3.0 - 5.0 - 7.0) / 10)

    def test_fsdp_without_ddp_run_uses_its_own_phases(self):
        write_run(os.path.join(self.measured, "fsdp"), "fsdp")
        row = self.rows()["fsdp"]
        self.assertTrue(row.compute_source.startswith("own"))
        self.assertTrue(row.optimizer_source.startswith("measured"))
        self.assertIn("| n/a |", self.text())

    def test_memory_per_rank_is_checked(self):
        config = m.load_config(SMALL)
        held = m.held_between_steps(config, "zero2", 2, 25)
        write_run(os.path.join(self.measured, "zero2"), "zero2", parallel={"memory_per_rank": [
            {"steady_state_bytes": held}, {"steady_state_bytes": held - 100}]})
        self.rows()
        self.assertIn(f"| zero2 | zero2 | 2 | {held / MIB:.1f} | {held / MIB:.1f} | 0.00 |", self.text())

    def test_unknown_strategy_names_the_file(self):
        write_run(os.path.join(self.measured, "odd"), "zero9")
        with self.assertRaises(m.InputError) as caught:
            m.write_check(self.measured, self.tmp.name, plot=False)
        self.assertIn("results.json", str(caught.exception))
        self.assertIn("zero9", str(caught.exception))

    def test_bad_memory_per_rank_names_the_file(self):
        write_run(os.path.join(self.measured, "bad"), "fsdp", parallel={"memory_per_rank": [{"peak_rss_bytes": 1}]})
        with self.assertRaises(m.InputError) as caught:
            m.write_check(self.measured, self.tmp.name, plot=False)
        self.assertIn("results.json", str(caught.exception))
        self.assertIn("steady_state_bytes", str(caught.exception))


if __name__ == "__main__":
    unittest.main()


class Hsdp(unittest.TestCase):
    """hsdp: fsdp inside a shard group (a node), then each slice all-reduced across the groups."""
    # Nodes of 8 GPUs; a slow network between them (IB100: 12.5 GB/s per node), NVLink inside.
    cluster = m.Cluster(gpus_per_node=8, nvlink_Bps=353e9, net_Bps=12.5e9, alpha_intra=3.4e-6,
                        alpha_inter=9.6e-6, base_latency=8.4e-6)
    compute = m.Compute(forward=0.0066, backward=0.0131, optimizer=0.0015, data=0.0)

    @classmethod
    def setUpClass(cls):
        cls.base = m.load_config(os.path.join(ROOT, "bench", "bert-base-config.json"))

    def point(self, strategy, p, **kwargs):
        return m.project_point(self.base, self.compute, self.cluster, p, strategy, 25, 384, **kwargs)

    def test_one_node_is_fsdp_on_that_node(self):
        for p in (2, 4, 8):
            fsdp, hsdp = self.point("fsdp", p), self.point("hsdp", p)
            self.assertEqual(hsdp, fsdp, p)
            self.assertEqual(hsdp.node_bytes, 0.0)

    def test_a_group_of_the_world_is_fsdp_on_any_network(self):
        units = m.build_units(m.parameter_list(self.base), 4, self.base["num_hidden_layers"])
        shares = [1 / len(units)] * len(units)
        for micro in (1, 2):
            fsdp = m.simulate_fsdp_step(m.StepInput(0, 1, 2, 0.1, "fsdp", 4, 200), units, shares, m.Link(1e-5, 1e-9), micro)
            hsdp = m.simulate_fsdp_step(m.StepInput(0, 1, 2, 0.1, "hsdp", 4, 200, shard_group=4), units, shares,
                                        m.Link(1e-5, 1e-9), micro)
            self.assertEqual(hsdp, fsdp)

    def test_inter_node_bytes_are_one_ring_all_reduce_of_the_shard(self):
        units = m.build_units(m.parameter_list(self.base), 8, self.base["num_hidden_layers"])
        shard = sum(u.nbytes for u in units) / 8  # a rank's slice of every unit, fp32
        in_node = self.point("fsdp", 8)
        for nodes in (2, 8, 64):
            hsdp = self.point("hsdp", 8 * nodes)
            across = m.ring_bytes("all_reduce", shard, nodes)
            self.assertAlmostEqual(hsdp.network_bytes - in_node.network_bytes, across, delta=1e-3)
            self.assertAlmostEqual(hsdp.node_bytes, 8 * across, delta=1e-3)  # 8 GPUs through the node's NIC
            self.assertAlmostEqual(hsdp.node_bytes, 2 * (nodes - 1) / nodes * sum(u.nbytes for u in units), delta=1e-3)
            # the gathers, reduce-scatters and the norm stay in the node: one collective per unit more than fsdp
            self.assertEqual(hsdp.collectives, in_node.collectives + len(units))
            fsdp = self.point("fsdp", 8 * nodes)
            self.assertEqual(fsdp.node_bytes, fsdp.network_bytes)  # its rings cross every NIC
            self.assertLess(hsdp.node_bytes, 0.7 * fsdp.node_bytes)

    def test_bf16_halves_what_crosses_the_nodes(self):
        fp32, bf16 = self.point("hsdp", 64), self.point("hsdp", 64, reduce_dtype="bf16")
        self.assertAlmostEqual(bf16.node_bytes, fp32.node_bytes / 2, delta=1e-3)
        self.assertLess(bf16.step, fp32.step)

    def test_the_node_shares_its_nic(self):
        # 8 GPUs all-reduce their slices of a unit at once through one NIC: as long as one all-reduce of
        # the whole unit across the nodes, one GPU per node.
        across = m.replica_network(self.cluster, 8)
        one_per_node = m.Cluster(1, self.cluster.nvlink_Bps, self.cluster.net_Bps, self.cluster.alpha_intra,
                                 self.cluster.alpha_inter, self.cluster.base_latency)
        for nodes in (2, 8, 64):
            for n in (1 << 20, 64 << 20):
                self.assertAlmostEqual(across.cost("all_reduce", n / 8, nodes)[0],
                                       one_per_node.cost("all_reduce", n, nodes)[0])
        self.assertEqual(across.bandwidth(64), self.cluster.net_Bps / 8)

    def test_beats_fsdp_across_nodes_on_a_slow_network(self):
        for p in (16, 64, 512):
            hsdp, fsdp = self.point("hsdp", p), self.point("fsdp", p)
            self.assertLess(hsdp.step, fsdp.step, p)
            self.assertLess(hsdp.exposed, fsdp.exposed, p)

    def test_all_reduces_across_nodes_follow_the_reduce_scatters(self):
        # Every collective 1 s (FakeNetwork: all-reduces free; here a flat link of 1 s per all-reduce too).
        class Seconds:
            def cost(self, op, n, p):
                return 1.0, "ring"
        units = [m.Bucket([k], 4) for k in range(3)]
        inp = m.StepInput(0.0, 3.0, 6.0, 0.5, "hsdp", 4, 10, shard_group=2)
        result = m.simulate_fsdp_step(inp, units, [1 / 3] * 3, Seconds())
        # As Fsdp.test_timeline_by_hand: backward 4-10, reduce-scatters end at 7, 9, 11. The all-reduce
        # of unit 2 is issued at 8 (the first issue from the plan after 7), unit 1's at 10 (the end of
        # backward), unit 0's at 11 (closed() waits for its reduce-scatter): 8-9, 10-11, 11-12.
        self.assertAlmostEqual(result.backward, 6.0)
        self.assertAlmostEqual(result.tail, 2.0)
        self.assertAlmostEqual(result.replica_seconds, 3.0)
        self.assertEqual(result.collectives, 8 + 3 + 1)

    def test_accumulation_waits_for_the_replicas_before_the_next_backward(self):
        units = m.build_units(m.parameter_list(self.base), 8, self.base["num_hidden_layers"])
        shares = m.group_shares(units, m.backward_costs(m.parameter_list(self.base), self.base, 384))
        inp = m.StepInput(0.0, 0.0066, 0.0131, 0.0015, "hsdp", 64, 200, shard_group=8)
        one = m.simulate_fsdp_step(inp, units, shares, self.cluster, 1)
        two = m.simulate_fsdp_step(dataclasses.replace(inp, forward=0.0132, backward=0.0262), units, shares,
                                   self.cluster, 2)
        norm = m.ring_bytes("all_reduce", 8 * 200, 8)  # once a step, inside the node
        self.assertAlmostEqual(two.network_bytes - norm, 2 * (one.network_bytes - norm), delta=1.0)
        self.assertAlmostEqual(two.node_bytes, 2 * one.node_bytes, delta=1.0)
        # The first micro-batch's all-reduces across nodes start after its backward does and outlast it
        # and the second forward: the second backward waits for them (Fsdp::begin_backward closes it).
        self.assertGreater(one.replica_seconds, 0.0131 + 0.0066)
        self.assertGreater(two.backward, 0.0262 + one.replica_seconds - 0.0131 - 0.0066)
        self.assertAlmostEqual(two.replica_seconds, 2 * one.replica_seconds)

    def test_memory_is_fsdp_over_the_group(self):
        for p in (8, 64, 512):
            self.assertEqual(m.state_bytes_per_param("hsdp", p, 8), m.state_bytes_per_param("fsdp", 8))
            self.assertEqual(m.held_between_steps(self.base, "hsdp", p, 25, 8), m.held_between_steps(self.base, "fsdp", 8, 25))
            self.assertEqual(m.peak_memory_terms(self.base, "hsdp", p, 384, "bf16", group=8),
                             m.peak_memory_terms(self.base, "fsdp", 8, 384, "bf16"))
        self.assertEqual(m.state_bytes_per_param("hsdp", 4, 8), m.state_bytes_per_param("fsdp", 4))
        with self.assertRaises(ValueError):
            m.state_bytes_per_param("hsdp", 64)  # no group


class HsdpProjection(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.path = os.path.join(ROOT, "results", "scaling_model", "clusters.json")
        cls.raw = m.load_clusters(cls.path)
        cls.configs = {"bert-base": m.load_config(os.path.join(ROOT, "bench", "bert-base-config.json")),
                       "bert-large": m.load_config(os.path.join(ROOT, "results", "scaling_model", "bert-large-config.json"))}
        cls.points, _ = m.run_hsdp_projections(cls.raw, cls.configs, cls.path)

    def test_every_model_rate_cluster_and_network(self):
        keys = {(pt.model, pt.rate, pt.nodes, pt.net) for pt in self.points}
        self.assertEqual(len(keys), 2 * 2 * 2 * 2)
        self.assertEqual({pt.p for pt in self.points}, {64, 512})

    def test_compute_from_the_rates(self):
        for pt in self.points:
            if pt.model == "bert-base":
                rate = 1511 if pt.rate.startswith("1,511") else 3000
                step = pt.compute.data + pt.compute.forward + pt.compute.backward + pt.compute.optimizer
                self.assertAlmostEqual(step, 32 / rate)

    def test_hsdp_beats_fsdp_and_a_faster_step_scales_worse(self):
        for pt in self.points:
            self.assertLess(pt.results[("hsdp", "fp32", 1)].step, pt.results[("fsdp", "fp32", 1)].step)
        for model in self.configs:
            slow = m.find_hsdp_point(self.points, model, "1,511 (H200, measured)", 64, "IB100")
            fast = m.find_hsdp_point(self.points, model, "3,000 (target)", 64, "IB100")
            for s in m.HSDP_STRATEGIES:
                self.assertLess(fast.one_gpu / fast.results[(s, "fp32", 1)].step,
                                slow.one_gpu / slow.results[(s, "fp32", 1)].step)

    def test_a_rate_at_another_batch_is_refused(self):
        raw = json.loads(json.dumps(self.raw))
        next(iter(raw["hsdp_projection"]["rates"].values()))["batch"] = 24
        with self.assertRaisesRegex(m.InputError, "batch_per_gpu"):
            m.load_hsdp_projection(raw, self.path)


class CheckKeepsItsRuns(unittest.TestCase):
    def test_committed_check_is_unchanged(self):
        # The runs measured before hsdp existed give the committed check.md (tools.regenerate checks the PNG).
        data = os.path.join(ROOT, "results", "scaling_model")
        with tempfile.TemporaryDirectory() as out:
            m.write_check(os.path.join(data, "measured"), out, plot=False,
                          reduced_precision=os.path.join(data, "measured-bf16"))
            with open(os.path.join(out, "check.md"), encoding="utf-8") as f, \
                    open(os.path.join(data, "check.md"), encoding="utf-8") as committed:
                self.assertEqual(f.read(), committed.read())

    def test_an_hsdp_run_is_refused_by_name(self):
        with tempfile.TemporaryDirectory() as tmp:
            measured = os.path.join(tmp, "measured")
            write_run(os.path.join(measured, "hsdp"), "hsdp")
            with self.assertRaisesRegex(m.InputError, "hsdp"):
                m.load_measured(measured)


class StrategiesAreThePrograms(unittest.TestCase):
    """The scaling model's strategies and their traits are those of mpibert's table (`mpibert
    strategies --json`, MPIBERT_BIN_DIR or build/bin): a strategy added to the program and not to
    the model, or a trait that disagrees with what a rank holds, fails here."""

    def test_names_and_traits_follow_the_table(self):
        import subprocess
        binary = os.path.join(os.environ.get("MPIBERT_BIN_DIR", os.path.join(ROOT, "build", "bin")), "mpibert")
        rows = json.loads(subprocess.run([binary, "strategies", "--json"], check=True, capture_output=True, text=True).stdout)
        self.assertEqual(m.STRATEGIES, [row["name"] for row in rows])
        sharded = tuple(row["name"] for row in rows if row["optimizer_state"] != "whole")
        units = tuple(row["name"] for row in rows if row["parameters"] != "whole")
        self.assertEqual(m.SHARDED_STRATEGIES, sharded)
        self.assertEqual(m.UNIT_STRATEGIES, units)
        self.assertEqual(m.REDUCE_SCATTER_STRATEGIES, tuple(name for name in sharded if name not in units))
