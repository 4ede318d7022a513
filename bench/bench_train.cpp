// Training throughput on SQuAD shards: full vs dynamic padding (and length grouping).
//   bench_train --shards DIR --preset small|base [--batch B] [--steps N] [--threads T]
//               [--variant all|full|dynamic|grouped] [--json]
// Each configuration runs N optimizer steps on the same shuffled order after one warm-up step
// and prints samples/s, padded tokens per sample and the speedup over full padding (or, with
// --json, one JSON object per configuration: bench/compare_hf.sh reads them).
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>

#include "mpibert/core/process.hpp"
#include "mpibert/data/batching.hpp"
#include "mpibert/data/sampler.hpp"
#include "mpibert/model/optimizer.hpp"
#include "mpibert/train/trainer.hpp"

namespace {

struct Variant {
  const char* key;
  const char* name;
  mpibert::Padding padding;
  bool group_by_length;
};

const Variant kVariants[] = {{"full", "full padding", mpibert::Padding::kFull, false},
                             {"dynamic", "dynamic padding", mpibert::Padding::kDynamic, false},
                             {"grouped", "dynamic + group_by_length", mpibert::Padding::kDynamic, true}};

}  // namespace

int main(int argc, char** argv) {
  std::string shards, preset = "small";
  int64_t batch = 0, steps = 10;
  int threads = 2;
  std::string only = "all";
  bool json = false;
  CLI::App app{"mpibert training throughput by padding"};
  app.add_option("--shards", shards, "prepared train shards")->required();
  app.add_option("--preset", preset)->check(CLI::IsMember({"base", "small"}));
  app.add_option("--batch", batch, "default: 2 for base, 32 for small");
  app.add_option("--steps", steps)->capture_default_str();
  app.add_option("--threads", threads)->capture_default_str();
  app.add_option("--variant", only, "one configuration, or all")
      ->check(CLI::IsMember({"all", "full", "dynamic", "grouped"}))
      ->capture_default_str();
  app.add_flag("--json", json, "one JSON object per configuration instead of a table line");
  CLI11_PARSE(app, argc, argv);
  mpibert::keep_freed_memory_for_reuse();

  const mpibert::BertConfig config = mpibert::BertConfig::preset(preset);
  if (batch == 0) batch = preset == "base" ? 2 : 32;
  torch::set_num_threads(threads);
  const mpibert::FeatureStore store = mpibert::FeatureStore::open(shards);

  double full_rate = 0;
  for (const Variant& variant : kVariants) {
    if (only != "all" && only != variant.key) continue;
    torch::manual_seed(0);
    mpibert::BertForQuestionAnswering model(config);
    model->train();
    const std::vector<torch::Tensor> parameters = model->parameters();
    mpibert::AdamW optimizer(model->named_parameters(), mpibert::AdamWOptions{});
    mpibert::DistributedSampler sampler(store.num_features(), 0, 1, mpibert::DistributedSampler::Mode::kTrain, 42);
    if (variant.group_by_length) sampler.group_by_length(mpibert::feature_lengths(store), batch);
    const std::vector<int64_t> order = sampler.indices(0);

    int64_t samples = 0, padded_tokens = 0;
    std::chrono::steady_clock::time_point start;
    for (int64_t step = 0; step <= steps; ++step) {
      if (step == 1) start = std::chrono::steady_clock::now();  // step 0 warms up
      const auto first = order.begin() + static_cast<long>(step * batch);
      mpibert::Batch b = mpibert::make_batch(store, std::vector<int64_t>(first, first + batch), variant.padding);
      auto out = model->forward(b.input_ids, b.token_type_ids, b.attention_mask, b.start_positions, b.end_positions);
      out.loss.backward();
      mpibert::clip_grad_norm(parameters, 1.0);
      optimizer.step(1e-4);
      optimizer.zero_grad();
      if (step > 0) {
        samples += batch;
        padded_tokens += b.padded_length * batch;
      }
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double rate = static_cast<double>(samples) / seconds;
    const double tokens_per_sample = static_cast<double>(padded_tokens) / static_cast<double>(samples);
    if (json) {
      std::printf("{\"samples_per_second\": %.4f, \"tokens_per_sample\": %.1f, \"steps\": %lld, \"batch\": %lld, "
                  "\"threads\": %d, \"variant\": \"%s\"}\n",
                  rate, tokens_per_sample, static_cast<long long>(steps), static_cast<long long>(batch), threads, variant.key);
      continue;
    }
    if (variant.padding == mpibert::Padding::kFull) full_rate = rate;
    std::printf("%-5s batch %3lld threads %d %-26s %7.2f samples/s  %5.0f tokens/sample", preset.c_str(),
                static_cast<long long>(batch), threads, variant.name, rate, tokens_per_sample);
    if (full_rate > 0) std::printf("  %.2fx full padding", rate / full_rate);  // not when --variant skipped it
    std::printf("\n");
  }
  return 0;
}
