// Training throughput on SQuAD shards: full vs dynamic padding, length grouping, packed batches.
//   bench_train --shards DIR [--model TYPE] --preset small|base [--batch B] [--steps N]
//               [--threads T] [--variant all|full|dynamic|grouped|packed] [--bf16] [--json]
//               [--dump-batches FILE]
// Each configuration runs N optimizer steps on the same shuffled order after one warm-up step
// and prints samples/s, padded tokens per sample, MFU (model FLOPs on real tokens over the
// square-GEMM rate measured first, in the same precision and threads) and the speedup over full
// padding (or, with --json, one JSON object per configuration: bench/compare_hf.sh reads them).
// --dump-batches FILE trains nothing: it writes the model's config.json (HF's keys) and the
// warm-up and timed batches of the first selected variant, padded, as JSON, for
// bench/hf_family_step.py to run HF's own model of the same config on the same batches.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "mpibert/core/process.hpp"
#include "mpibert/data/batching.hpp"
#include "mpibert/data/sampler.hpp"
#include "mpibert/eval/batch_forward.hpp"
#include "mpibert/model/model_registry.hpp"
#include "mpibert/optim/optimizer.hpp"
#include "mpibert/runtime/device.hpp"
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
                             {"grouped", "dynamic + group_by_length", mpibert::Padding::kDynamic, true},
                             {"packed", "packed (no padding)", mpibert::Padding::kPacked, false}};

}  // namespace

int main(int argc, char** argv) {
  std::string shards, model_type = "bert", preset = "small";
  int64_t batch = 0, steps = 10;
  int threads = 2;
  std::string only = "all", optim = "adamw_torch_fused";
  bool json = false, bf16 = false;
  std::string dump_batches, device_name = "cpu";
  CLI::App app{"mpibert training throughput by padding"};
  app.add_option("--shards", shards, "prepared train shards")->required();
  app.add_option("--model", model_type, "HF's model_type of the model to train")
      ->check(CLI::IsMember(mpibert::qa_model_types()))
      ->capture_default_str();
  app.add_option("--preset", preset, "base: bert-base-uncased or distilbert-base-uncased; small: 2 layers, hidden 128")
      ->check(CLI::IsMember({"base", "small"}));
  app.add_option("--batch", batch, "default: 2 for base, 32 for small");
  app.add_option("--steps", steps)->capture_default_str();
  app.add_option("--threads", threads)->capture_default_str();
  app.add_option("--variant", only, "one configuration, or all")
      ->check(CLI::IsMember({"all", "full", "dynamic", "grouped", "packed"}))
      ->capture_default_str();
  app.add_flag("--bf16", bf16, "bf16 autocast, as mpibert train --bf16");
  app.add_option("--optim", optim, "as mpibert train --optim")
      ->check(CLI::IsMember({"adamw_torch", "adamw_torch_fused"}))
      ->capture_default_str();
  app.add_option("--device", device_name,
                 "where the model trains (a GPU: the batches copied there, each timing ending in a "
                 "synchronize)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  app.add_flag("--json", json, "one JSON object per configuration instead of a table line");
  app.add_option("--dump-batches", dump_batches, "write the config and the batches as JSON to FILE; train nothing");
  CLI11_PARSE(app, argc, argv);
  mpibert::keep_freed_memory_for_reuse();

  if (batch == 0) batch = preset == "base" ? 2 : 32;
  torch::set_num_threads(threads);
  const mpibert::FeatureStore store = mpibert::FeatureStore::open(shards);
  const torch::Device device(device_name == "cuda" ? torch::kCUDA : torch::kCPU);
  const double matmul_rate = !dump_batches.empty()
                                 ? 1.0
                                 : mpibert::measure_matmul_flops_per_second(device, bf16 ? torch::kBFloat16 : torch::kFloat, 1.0);
  const char* precision = bf16 ? "bf16" : "fp32";

  double full_rate = 0;
  for (const Variant& variant : kVariants) {
    if (only != "all" && only != variant.key) continue;
    torch::manual_seed(0);
    mpibert::ModelOptions model_options;
    model_options.autocast_bf16 = bf16;
    const mpibert::QAModelPtr model = mpibert::make_qa_model_preset(model_type, preset, model_options);
    model->module().to(device);
    model->module().train();
    const mpibert::TrainingFlops flops = model->training_flops();
    const std::vector<torch::Tensor> parameters = model->module().parameters();
    mpibert::AdamWOptions adam;
    adam.fused = optim == "adamw_torch_fused";
    mpibert::AdamW optimizer(model->module().named_parameters(), adam);
    mpibert::DistributedSampler sampler(store.num_features(), 0, 1, mpibert::DistributedSampler::Mode::kTrain, 42);
    if (variant.group_by_length) sampler.group_by_length(mpibert::feature_lengths(store), batch);
    const std::vector<int64_t> order = sampler.indices(0);
    if (static_cast<int64_t>(order.size()) < (steps + 1) * batch) {
      std::fprintf(stderr, "bench_train: %s: %zu features, fewer than the %lld that %lld steps of %lld take (one warms up)\n",
                   shards.c_str(), order.size(), static_cast<long long>((steps + 1) * batch), static_cast<long long>(steps + 1),
                   static_cast<long long>(batch));
      return 1;
    }
    if (!dump_batches.empty()) {
      if (variant.padding == mpibert::Padding::kPacked) {
        std::fprintf(stderr, "bench_train: --dump-batches takes a padded variant\n");
        return 2;
      }
      auto rows = [](const torch::Tensor& t) {
        const torch::Tensor c = t.to(torch::kLong).contiguous();
        nlohmann::json out = nlohmann::json::array();
        for (int64_t i = 0; i < c.size(0); ++i) {
          const int64_t* p = c[i].data_ptr<int64_t>();
          out.push_back(std::vector<int64_t>(p, p + c.size(1)));
        }
        return out;
      };
      auto values = [](const torch::Tensor& t) {
        const torch::Tensor c = t.to(torch::kLong).contiguous();
        return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
      };
      nlohmann::ordered_json out = {
          {"config", model->config_json()}, {"variant", variant.key}, {"batches", nlohmann::json::array()}};
      for (int64_t step = 0; step <= steps; ++step) {
        const auto first = order.begin() + static_cast<long>(step * batch);
        const mpibert::Batch b = mpibert::make_batch(store, std::vector<int64_t>(first, first + batch), variant.padding);
        out["batches"].push_back({{"input_ids", rows(b.input_ids)},
                                  {"token_type_ids", rows(b.token_type_ids)},
                                  {"attention_mask", rows(b.attention_mask)},
                                  {"start_positions", values(b.start_positions)},
                                  {"end_positions", values(b.end_positions)}});
      }
      std::ofstream(dump_batches) << out.dump() << "\n";
      return 0;
    }

    int64_t samples = 0, padded_tokens = 0, real_tokens = 0;
    double model_flops = 0;
    std::chrono::steady_clock::time_point start;
    for (int64_t step = 0; step <= steps; ++step) {
      if (step == 1) start = std::chrono::steady_clock::now();  // step 0 warms up
      const auto first = order.begin() + static_cast<long>(step * batch);
      const mpibert::Batch b = mpibert::make_batch(store, std::vector<int64_t>(first, first + batch), variant.padding).to(device);
      mpibert::forward_batch(*model, b).loss.backward();
      mpibert::clip_grad_norm(parameters, 1.0);
      optimizer.step(1e-4);
      optimizer.zero_grad();
      if (step > 0) {
        samples += batch;
        padded_tokens += b.input_ids.numel();
        real_tokens += b.real_tokens;
        model_flops += flops.of(b.real_tokens, b.real_token_pairs);
      }
    }
    if (device.is_cuda()) mpibert::synchronize(device);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double rate = static_cast<double>(samples) / seconds;
    const double tokens_per_sample = static_cast<double>(padded_tokens) / static_cast<double>(samples);
    const double model_rate = model_flops / seconds, mfu = model_rate / matmul_rate;
    if (json) {
      std::printf(
          "{\"samples_per_second\": %.4f, \"tokens_per_sample\": %.1f, \"real_tokens_per_sample\": %.1f, "
          "\"model_flops_per_sample\": %.6g, \"model_flops_per_second\": %.6g, \"matmul_flops_per_second\": %.6g, "
          "\"mfu\": %.4f, \"precision\": \"%s\", \"steps\": %lld, \"batch\": %lld, \"threads\": %d, "
          "\"variant\": \"%s\", \"optim\": \"%s\", \"model_type\": \"%s\", \"device\": \"%s\"}\n",
          rate, tokens_per_sample, static_cast<double>(real_tokens) / static_cast<double>(samples),
          model_flops / static_cast<double>(samples), model_rate, matmul_rate, mfu, precision, static_cast<long long>(steps),
          static_cast<long long>(batch), threads, variant.key, optim.c_str(), model_type.c_str(), device_name.c_str());
      continue;
    }
    if (variant.padding == mpibert::Padding::kFull) full_rate = rate;
    std::printf("%s %-5s %s batch %3lld threads %d %-26s %7.2f samples/s  %5.0f tokens/sample  MFU %.2f", model_type.c_str(),
                preset.c_str(), precision, static_cast<long long>(batch), threads, variant.name, rate, tokens_per_sample, mfu);
    if (full_rate > 0) std::printf("  %.2fx full padding", rate / full_rate);  // not when --variant skipped it
    std::printf("\n");
  }
  return 0;
}
