// Peak memory of one training step (forward and backward, QA loss) with or without activation
// checkpointing, on a randomly initialized model from a config.json and a random batch padded to
// `seq` (every token real), as mpibert train --padding full runs it:
//   bench_checkpoint_memory --config bench/bert-base-config.json --batch 8 [--seq 384]
//                           [--gradient-checkpointing] [--threads 2]
// Prints one JSON object: the resident set before the step (the model) and its peak during the
// step (getrusage), in bytes, and the step's seconds. One configuration per process, since the
// peak is the process's (bench/checkpoint_memory.sh runs the table).
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>

#include <unistd.h>

#include "mpibert/core/process.hpp"
#include "mpibert/model/bert_qa.hpp"

namespace {

// The resident set now (/proc/self/statm's second field, in pages), in bytes.
int64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

}  // namespace

int main(int argc, char** argv) {
  std::string config_path;
  int64_t batch = 8, seq = 384;
  int threads = 2;
  bool checkpointing = false;
  CLI::App app{"peak memory of a training step, with or without activation checkpointing"};
  app.add_option("--config", config_path, "HF config.json")->required();
  app.add_option("--batch", batch)->capture_default_str();
  app.add_option("--seq", seq)->capture_default_str();
  app.add_option("--threads", threads)->capture_default_str();
  app.add_flag("--gradient-checkpointing", checkpointing, "as mpibert train --gradient-checkpointing");
  CLI11_PARSE(app, argc, argv);
  torch::set_num_threads(threads);

  const mpibert::BertConfig config = mpibert::BertConfig::load(config_path);
  mpibert::ModelOptions options;
  options.gradient_checkpointing = checkpointing;
  torch::manual_seed(0);
  mpibert::BertForQuestionAnswering model(config, options);
  model->train();
  const torch::Tensor ids = torch::randint(1, config.vocab_size, {batch, seq}, torch::kLong);
  const torch::Tensor positions = torch::randint(0, seq, {batch}, torch::kLong);
  const int64_t before = resident_bytes();

  const auto start = std::chrono::steady_clock::now();
  model->forward(ids, torch::zeros_like(ids), torch::ones_like(ids), positions, positions).loss.backward();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "{\"config\": \"%s\", \"layers\": %lld, \"hidden\": %lld, \"batch\": %lld, \"seq\": %lld, "
      "\"gradient_checkpointing\": %s, \"threads\": %d, \"model_rss_bytes\": %lld, \"peak_rss_bytes\": %lld, "
      "\"step_seconds\": %.2f}\n",
      config_path.c_str(), static_cast<long long>(config.num_hidden_layers), static_cast<long long>(config.hidden_size),
      static_cast<long long>(batch), static_cast<long long>(seq), checkpointing ? "true" : "false", threads,
      static_cast<long long>(before), static_cast<long long>(mpibert::peak_resident_bytes()), seconds);
  return 0;
}
