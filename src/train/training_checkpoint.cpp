#include "mpibert/train/training_checkpoint.hpp"

#include <ATen/Context.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <mutex>
#include <sstream>

#include "mpibert/core/error.hpp"
#include "mpibert/core/io.hpp"
#include "mpibert/dist/host_collectives.hpp"
#include "mpibert/model/hf_model_dir.hpp"

namespace fs = std::filesystem;

namespace mpibert {
namespace {

// The default generator of a device type: CPU, or the current CUDA device's.
at::Generator default_generator(const torch::Device& device) {
  return device.is_cuda() ? at::globalContext().defaultGenerator(device) : at::detail::getDefaultCPUGenerator();
}

torch::Tensor rng_state(const torch::Device& device) {
  at::Generator generator = default_generator(device);
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

void set_rng_state(const torch::Device& device, const torch::Tensor& state) {
  at::Generator generator = default_generator(device);
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state.clone());
}

int64_t checkpoint_step(const fs::path& path) {
  const std::string name = path.filename().string();
  if (name.rfind("checkpoint-", 0) != 0) return -1;
  try {
    return std::stoll(name.substr(11));
  } catch (const std::exception&) {
    return -1;
  }
}

std::string rank_file(int rank) { return "rank-" + std::to_string(rank) + ".safetensors"; }

// The shape that a checkpoint and a run must share.
std::string shape_mismatch(const BertConfig& a, const BertConfig& b) {
  std::ostringstream out;
  auto compare = [&](const char* key, int64_t x, int64_t y) {
    if (x != y) out << (out.tellp() > 0 ? ", " : "") << key << " " << x << " (this run: " << y << ")";
  };
  compare("vocab_size", a.vocab_size, b.vocab_size);
  compare("hidden_size", a.hidden_size, b.hidden_size);
  compare("num_hidden_layers", a.num_hidden_layers, b.num_hidden_layers);
  compare("num_attention_heads", a.num_attention_heads, b.num_attention_heads);
  compare("intermediate_size", a.intermediate_size, b.intermediate_size);
  compare("max_position_embeddings", a.max_position_embeddings, b.max_position_embeddings);
  return out.str();
}

void barrier_if_several(const CheckpointContext& context, const std::string& what) {
  if (context.world_size > 1) barrier(what);
}

}  // namespace

nlohmann::ordered_json TrainerState::to_json(const BertConfig& config) const {
  nlohmann::ordered_json history = nlohmann::ordered_json::array();
  for (const auto& [step, loss] : loss_history) history.push_back({{"step", step}, {"loss", loss}});
  return {{"global_step", global_step},
          {"epoch", epoch},
          {"micro_batches_done_in_epoch", micro_batches_done},
          {"world_size", world_size},
          {"strategy", strategy},
          {"best_metric", best_metric ? nlohmann::ordered_json(*best_metric) : nlohmann::ordered_json()},
          {"best_metric_name", "eval_f1"},
          {"best_step", best_step},
          {"total_flos", total_flos},
          {"model_config", config.to_json()},
          {"loss_history", history}};
}

std::string checkpoint_dir(const std::string& output_dir, int64_t step) {
  return (fs::path(output_dir) / ("checkpoint-" + std::to_string(step))).string();
}

std::vector<std::string> checkpoints_by_step(const std::string& output_dir) {
  std::vector<fs::path> found;
  if (fs::exists(output_dir))
    for (const auto& entry : fs::directory_iterator(output_dir))
      if (entry.is_directory() && checkpoint_step(entry.path()) >= 0) found.push_back(entry.path());
  std::sort(found.begin(), found.end(), [](const fs::path& a, const fs::path& b) { return checkpoint_step(a) < checkpoint_step(b); });
  return {found.begin(), found.end()};
}

void save_training_checkpoint(const CheckpointContext& context, BertForQuestionAnswering& model, DataParallel& parallel,
                              const TrainerState& state, const torch::Device& device) {
  const fs::path final_dir = checkpoint_dir(context.output_dir, state.global_step);
  const fs::path staging = fs::path(context.output_dir) / (".checkpoint-" + std::to_string(state.global_step) + ".tmp");
  const bool root = context.rank == 0;
  if (root) {
    fs::remove_all(staging);
    fs::create_directories(staging);
  }
  barrier_if_several(context, "the checkpoint directory " + staging.string());
  if (root) {
    save_pretrained(model, staging.string(), context.vocab);
    if (!parallel.optimizer_state_is_sharded())
      write_safetensors((staging / "optimizer.safetensors").string(), parallel.optimizer_state());
    write_file_atomic((staging / "trainer_state.json").string(), state.to_json(model->config()).dump(2) + "\n");
  }
  std::vector<NamedTensor> own = {{"cpu_rng_state", rng_state(torch::kCPU)}};
  if (device.is_cuda()) own.push_back({"cuda_rng_state", rng_state(device)});
  if (parallel.optimizer_state_is_sharded())
    for (auto& tensor : parallel.optimizer_state()) own.push_back(tensor);
  write_safetensors((staging / rank_file(context.rank)).string(), own);
  barrier_if_several(context, "every rank's part of " + final_dir.string());
  if (root) {
    fs::remove_all(final_dir);
    rename_file(staging.string(), final_dir.string());
    spdlog::info("checkpoint: {}", final_dir.string());
    const auto all = checkpoints_by_step(context.output_dir);
    for (size_t i = 0; context.save_total_limit > 0 && i + static_cast<size_t>(context.save_total_limit) < all.size(); ++i)
      fs::remove_all(all[i]);
  }
  barrier_if_several(context, "the rename of " + final_dir.string());
}

TrainerState load_training_checkpoint_model(const std::string& dir, const CheckpointContext& context,
                                            BertForQuestionAnswering& model) {
  const auto json = nlohmann::json::parse(read_file(dir + "/trainer_state.json"));
  TrainerState state;
  state.world_size = json.value("world_size", 1);
  state.strategy = json.value("strategy", std::string("ddp"));
  if (state.world_size != context.world_size)
    throw InputError(describe(dir, "trainer_state.json", "written by a run of " + std::to_string(state.world_size) +
                                                             " ranks; this run has " + std::to_string(context.world_size) +
                                                             ": resume with the same number of ranks (the data order and the "
                                                             "global batch depend on it)"));
  if (context.world_size > 1 && state.strategy != context.strategy)
    throw InputError(describe(dir, "trainer_state.json", "written with --strategy " + state.strategy + "; this run uses " + context.strategy));
  const BertConfig saved = BertConfig::load(dir + "/config.json");
  if (std::string mismatch = shape_mismatch(saved, model->config()); !mismatch.empty())
    throw InputError(describe(dir, "", "checkpoint of another model shape: " + mismatch));
  if (!context.vocab.empty() && read_file_bytes(dir + "/vocab.txt") != read_file_bytes(context.vocab))
    throw InputError(describe(dir, "", "checkpoint trained with another vocab than " + context.vocab + " (its own is vocab.txt there)"));
  load_state(model, SafetensorsFile::open(dir + "/model.safetensors"));
  state.global_step = json.at("global_step");
  state.epoch = json.at("epoch");
  state.micro_batches_done = json.at("micro_batches_done_in_epoch");
  for (const auto& entry : json.at("loss_history")) state.loss_history.emplace_back(entry.at("step"), entry.at("loss"));
  if (json.contains("best_metric") && !json["best_metric"].is_null()) state.best_metric = json["best_metric"].get<double>();
  state.best_step = json.value("best_step", int64_t{-1});
  state.total_flos = json.value("total_flos", 0.0);
  return state;
}

void load_training_checkpoint_rest(const std::string& dir, const CheckpointContext& context, DataParallel& parallel,
                                   const torch::Device& device) {
  const std::string own_path = dir + "/" + rank_file(context.rank);
  SafetensorsFile own = SafetensorsFile::open(own_path);
  if (parallel.optimizer_state_is_sharded()) {
    parallel.load_optimizer_state(own, own_path);
  } else {
    parallel.load_optimizer_state(SafetensorsFile::open(dir + "/optimizer.safetensors"), dir + "/optimizer.safetensors");
  }
  set_rng_state(torch::kCPU, own.get("cpu_rng_state"));
  if (device.is_cuda()) {
    if (own.find("cuda_rng_state")) {
      set_rng_state(device, own.get("cuda_rng_state"));
    } else {
      spdlog::warn("{}: written on a CPU, no CUDA RNG state: dropout masks will differ from an uninterrupted GPU run", own_path);
    }
  }
}

}  // namespace mpibert
