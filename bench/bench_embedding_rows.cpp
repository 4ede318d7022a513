// How many distinct word-embedding rows a global batch touches: the payload of ddp's sparse
// embedding exchange (--embedding-exchange sparse), against the vocabulary the dense all-reduce
// sends. Global batches are drawn from prepared shards as training draws them (a shuffled epoch,
// consecutive batches), for each size; the scaling model's projection reads the JSON this prints
// (results/scaling_model/embedding_rows.json).
//   bench_embedding_rows --shards DIR [--sizes 8,16,...] [--batches 16] [--seed 42]
// Padding, when a batch has any, touches one more row (the pad id's), not counted here.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <vector>

#include "mpibert/data/sampler.hpp"
#include "mpibert/data/shards.hpp"

namespace {

struct RowCounts {
  int64_t global_batch = 0, batches = 0;
  double rows_mean = 0, tokens_mean = 0;
  int64_t rows_min = 0, rows_max = 0;
};

// Up to `batches` consecutive batches of `global_batch` features from the epoch's order.
RowCounts count_rows(const mpibert::FeatureStore& store, const std::vector<int64_t>& order, int64_t global_batch,
                     int64_t batches) {
  RowCounts counts;
  counts.global_batch = global_batch;
  counts.rows_min = store.manifest().vocab_size;
  std::vector<uint8_t> touched(static_cast<size_t>(store.manifest().vocab_size));
  for (int64_t b = 0; b < batches && (b + 1) * global_batch <= static_cast<int64_t>(order.size()); ++b) {
    std::fill(touched.begin(), touched.end(), 0);
    int64_t tokens = 0;
    for (int64_t i = b * global_batch; i < (b + 1) * global_batch; ++i) {
      const mpibert::FeatureView feature = store.feature(order[static_cast<size_t>(i)]);
      for (int32_t t = 0; t < feature.length; ++t) touched[feature.input_ids[t]] = 1;
      tokens += feature.length;
    }
    const int64_t rows = std::count(touched.begin(), touched.end(), 1);
    counts.rows_mean += static_cast<double>(rows);
    counts.tokens_mean += static_cast<double>(tokens);
    counts.rows_min = std::min(counts.rows_min, rows);
    counts.rows_max = std::max(counts.rows_max, rows);
    ++counts.batches;
  }
  if (counts.batches > 0) {
    counts.rows_mean /= static_cast<double>(counts.batches);
    counts.tokens_mean /= static_cast<double>(counts.batches);
  }
  return counts;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"distinct word-embedding rows per global batch, from prepared shards"};
  std::string shards;
  std::vector<int64_t> sizes = {8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192};
  int64_t batches = 16;
  uint64_t seed = 42;
  app.add_option("--shards", shards, "shards prepared with mpibert-prep --split train")->required();
  app.add_option("--sizes", sizes, "global batch sizes (features)")->delimiter(',')->capture_default_str();
  app.add_option("--batches", batches, "batches per size (fewer where the epoch runs out)")->capture_default_str();
  app.add_option("--seed", seed)->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    const mpibert::FeatureStore store = mpibert::FeatureStore::open(shards);
    const std::vector<int64_t> order =
        mpibert::DistributedSampler(store.num_features(), 0, 1, mpibert::DistributedSampler::Mode::kTrain, seed).indices(0);
    nlohmann::ordered_json out = {{"shards_input", store.manifest().input_path},
                                  {"num_features", store.num_features()},
                                  {"vocab_size", store.manifest().vocab_size},
                                  {"max_seq_length", store.manifest().params.max_seq_length},
                                  {"seed", seed},
                                  {"sizes", nlohmann::json::array()}};
    for (int64_t size : sizes) {
      if (size < 1 || size > store.num_features()) continue;
      const RowCounts c = count_rows(store, order, size, batches);
      out["sizes"].push_back({{"global_batch", c.global_batch},
                              {"batches", c.batches},
                              {"tokens_mean", c.tokens_mean},
                              {"rows_mean", c.rows_mean},
                              {"rows_min", c.rows_min},
                              {"rows_max", c.rows_max},
                              {"vocab_fraction_mean", c.rows_mean / static_cast<double>(store.manifest().vocab_size)}});
    }
    std::cout << out.dump(2) << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_embedding_rows: %s\n", e.what());
    return 1;
  }
}
