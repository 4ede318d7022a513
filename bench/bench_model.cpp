// Forward+backward throughput and peak memory of the QA model:
//   bench_model --preset base|small [--batch B] [--seq 384] [--threads T] [--steps N] [--separate-qkv]
// base = bert-base-uncased (defaults to batch 2); small = 2 layers, hidden 128, 2 heads,
// intermediate 512 (batch 32). Train mode (dropout 0.1), full-length random sequences.
#include <CLI/CLI.hpp>
#include <sys/resource.h>

#include <chrono>
#include <cstdio>

#include "mpibert/core/process.hpp"
#include "mpibert/model/bert_qa.hpp"

int main(int argc, char** argv) {
  std::string preset = "small";
  int64_t batch = 0, seq = 384, steps = 5;
  int threads = 1;
  bool separate_qkv = false;
  CLI::App app{"mpibert model benchmark"};
  app.add_option("--preset", preset)->check(CLI::IsMember({"base", "small"}));
  app.add_option("--batch", batch, "default: 2 for base, 32 for small");
  app.add_option("--seq", seq)->capture_default_str();
  app.add_option("--threads", threads)->capture_default_str();
  app.add_option("--steps", steps, "timed steps after one warm-up step")->capture_default_str();
  app.add_flag("--separate-qkv", separate_qkv, "three Q/K/V matmuls instead of one fused");
  CLI11_PARSE(app, argc, argv);
  mpibert::keep_freed_memory_for_reuse();

  const mpibert::BertConfig config = mpibert::BertConfig::preset(preset);
  if (batch == 0) batch = preset == "base" ? 2 : 32;
  torch::set_num_threads(threads);
  torch::manual_seed(0);
  mpibert::ModelOptions options;
  options.fused_qkv = !separate_qkv;
  mpibert::BertForQuestionAnswering model(config, options);
  model->train();

  auto input_ids = torch::randint(1000, config.vocab_size, {batch, seq}, torch::kLong);
  auto token_type_ids = torch::cat({torch::zeros({batch, 32}, torch::kLong), torch::ones({batch, seq - 32}, torch::kLong)}, 1);
  auto attention_mask = torch::ones({batch, seq}, torch::kLong);
  auto starts = torch::randint(32, seq, {batch}, torch::kLong), ends = starts;

  auto step = [&] {
    model->zero_grad();
    auto out = model->forward(input_ids, token_type_ids, attention_mask, starts, ends);
    out.loss.backward();
  };
  step();  // warm-up: allocator and BLAS buffers
  const auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < steps; ++i) step();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  std::printf("C++     %-5s threads %d batch %3lld seq %lld %s: %7.2f samples/s  %8.1f ms/step  peak RSS %6.0f MiB\n",
              preset.c_str(), threads, static_cast<long long>(batch), static_cast<long long>(seq),
              separate_qkv ? "separate-qkv" : "fused-qkv   ", static_cast<double>(batch * steps) / seconds,
              1000.0 * seconds / static_cast<double>(steps), static_cast<double>(usage.ru_maxrss) / 1024.0);
  return 0;
}
