// The optimizer phase of a training step: clipping by the global norm and AdamW, over a model's
// real parameter set, torch's AdamW op for op (HF's adamw_torch, mpibert's default) against its
// fused kernel (adamw_torch_fused), alternating in one process so that both see the same machine.
//   bench_optimizer [--preset base|small] [--rounds 5] [--threads 2]
// Prints ms per step for each, and the bytes the fused kernel must move at the least (parameters,
// gradients and both moments read, parameters and moments written: 28 bytes per parameter) per
// second: how close it gets to memory bandwidth.
#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "mpibert/model/bert_qa.hpp"
#include "mpibert/optim/optimizer.hpp"

namespace {

double seconds_of_steps(mpibert::BertForQuestionAnswering& model, mpibert::AdamW& optimizer, int steps) {
  const std::vector<torch::Tensor> parameters = model->parameters();
  const auto start = std::chrono::steady_clock::now();
  for (int s = 0; s < steps; ++s) {
    mpibert::clip_grad_norm(parameters, 1.0);
    optimizer.step(1e-4);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / steps;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"clipping + AdamW per step: torch's op-for-op AdamW against its fused kernel"};
  std::string preset = "base";
  int rounds = 5, steps = 3, threads = 2;
  app.add_option("--preset", preset)->check(CLI::IsMember({"base", "small"}))->capture_default_str();
  app.add_option("--rounds", rounds, "alternations of the two")->capture_default_str();
  app.add_option("--steps", steps, "optimizer steps per timing")->capture_default_str();
  app.add_option("--threads", threads)->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  torch::set_num_threads(threads);

  const mpibert::BertConfig config = mpibert::BertConfig::preset(preset);
  torch::manual_seed(0);
  mpibert::BertForQuestionAnswering model(config);
  int64_t numel = 0;
  for (auto& parameter : model->parameters()) {
    parameter.mutable_grad() = torch::randn_like(parameter) * 1e-3;
    numel += parameter.numel();
  }
  std::vector<std::unique_ptr<mpibert::AdamW>> optimizers;
  for (bool fused : {false, true}) {
    mpibert::AdamWOptions options;
    options.weight_decay = 0.01;
    options.fused = fused;
    optimizers.push_back(std::make_unique<mpibert::AdamW>(model->named_parameters(), options));
    seconds_of_steps(model, *optimizers.back(), 1);  // warm-up: the moments' pages, the kernels
  }
  std::vector<double> best = {1e30, 1e30};
  for (int round = 0; round < rounds; ++round)
    for (size_t k = 0; k < optimizers.size(); ++k) best[k] = std::min(best[k], seconds_of_steps(model, *optimizers[k], steps));

  std::printf("# mpibert bench_optimizer: %s (%lld parameters), %d threads, best of %d rounds of %d steps\n", preset.c_str(),
              static_cast<long long>(numel), threads, rounds, steps);
  std::printf("%-20s %10s %12s\n", "optim", "ms/step", "GB/s (28 B/param)");
  const char* names[] = {"adamw_torch", "adamw_torch_fused"};
  for (size_t k = 0; k < best.size(); ++k)
    std::printf("%-20s %10.1f %12.1f\n", names[k], best[k] * 1e3, 28.0 * static_cast<double>(numel) / best[k] / 1e9);
  std::printf("fused speedup: %.2fx\n", best[0] / best[1]);
  return 0;
}
