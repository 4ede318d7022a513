// Training throughput on SQuAD shards: full vs dynamic padding (and length grouping).
//   bench_train --shards DIR --preset small|base [--batch B] [--steps N] [--threads T]
// Each configuration runs N optimizer steps on the same shuffled order after one warm-up step
// and prints samples/s, padded tokens per sample and the speedup over full padding.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>

#include "mpibert/batching.hpp"
#include "mpibert/optim.hpp"
#include "mpibert/process.hpp"
#include "mpibert/sampler.hpp"
#include "mpibert/trainer.hpp"

namespace {

struct Variant {
  const char* name;
  mpibert::Padding padding;
  bool group_by_length;
};

}  // namespace

int main(int argc, char** argv) {
  std::string shards, preset = "small";
  int64_t batch = 0, steps = 10;
  int threads = 2;
  CLI::App app{"mpibert training throughput by padding"};
  app.add_option("--shards", shards, "prepared train shards")->required();
  app.add_option("--preset", preset)->check(CLI::IsMember({"base", "small"}));
  app.add_option("--batch", batch, "default: 2 for base, 32 for small");
  app.add_option("--steps", steps)->capture_default_str();
  app.add_option("--threads", threads)->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  mpibert::keep_freed_memory_for_reuse();

  const mpibert::BertConfig config = mpibert::BertConfig::preset(preset);
  if (batch == 0) batch = preset == "base" ? 2 : 32;
  torch::set_num_threads(threads);
  const mpibert::FeatureStore store = mpibert::FeatureStore::open(shards);

  double full_rate = 0;
  for (const Variant& variant : {Variant{"full padding", mpibert::Padding::kFull, false},
                                 Variant{"dynamic padding", mpibert::Padding::kDynamic, false},
                                 Variant{"dynamic + group_by_length", mpibert::Padding::kDynamic, true}}) {
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
    if (variant.padding == mpibert::Padding::kFull) full_rate = rate;
    std::printf("%-5s batch %3lld threads %d %-26s %7.2f samples/s  %5.0f tokens/sample  %.2fx full padding\n", preset.c_str(),
                static_cast<long long>(batch), threads, variant.name, rate,
                static_cast<double>(padded_tokens) / static_cast<double>(samples), rate / full_rate);
  }
  return 0;
}
