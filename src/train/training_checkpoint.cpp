#include "mpibert/train/training_checkpoint.hpp"

#include <ATen/Context.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <sstream>

#include "mpibert/core/error.hpp"
#include "mpibert/core/io.hpp"
#include "mpibert/core/json_fields.hpp"
#include "mpibert/model/hf_model_dir.hpp"
#include "mpibert/model/model_registry.hpp"
#include "mpibert/runtime/host_collectives.hpp"
#include "mpibert/text/hf_tokenizer.hpp"
#include "mpibert/train/stop_signals.hpp"

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

// The step of a folder named exactly checkpoint-DIGITS (HF's name); -1 for any other name, such
// as a user's checkpoint-500-best, which is never listed, rotated away or resumed.
int64_t checkpoint_step(const fs::path& path) {
  const std::string name = path.filename().string();
  const std::string prefix = "checkpoint-";
  if (name.size() <= prefix.size() || name.rfind(prefix, 0) != 0) return -1;
  int64_t step = 0;
  for (size_t i = prefix.size(); i < name.size(); ++i) {
    const char c = name[i];
    if (c < '0' || c > '9' || step > (INT64_MAX - (c - '0')) / 10) return -1;
    step = step * 10 + (c - '0');
  }
  return step;
}

std::string rank_file(int rank) { return "rank-" + std::to_string(rank) + ".safetensors"; }

// The whole optimizer state (ddp, one process); sharded strategies keep theirs in the rank files.
constexpr const char* kOptimizerFile = "optimizer.safetensors";

// Hidden names beside the checkpoints: one being built (.tmp), one being deleted (.removing), and
// one moved aside while a new save of its step takes its name (.replaced).
fs::path staging_dir(const std::string& output_dir, int64_t step) {
  return fs::path(output_dir) / (".checkpoint-" + std::to_string(step) + ".tmp");
}
fs::path replaced_dir(const std::string& output_dir, int64_t step) {
  return fs::path(output_dir) / (".checkpoint-" + std::to_string(step) + ".replaced");
}
bool ends_with(const std::string& name, const std::string& suffix) {
  return name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}
bool is_hidden_checkpoint_work(const std::string& name) {
  return name.rfind(".checkpoint-", 0) == 0 && (ends_with(name, ".tmp") || ends_with(name, ".removing"));
}
bool is_replaced_checkpoint(const std::string& name) {
  return name.rfind(".checkpoint-", 0) == 0 && ends_with(name, ".replaced");
}

// The checkpoint a .checkpoint-STEP.replaced folder was moved aside from: RUN/checkpoint-STEP ("" for
// another name).
std::string replaced_from(const fs::path& path) {
  const std::string name = path.filename().string(), suffix = ".replaced";
  if (name.rfind(".checkpoint-", 0) != 0 || !ends_with(name, suffix)) return "";
  const fs::path original = path.parent_path() / name.substr(1, name.size() - 1 - suffix.size());
  return checkpoint_step(original) >= 0 ? original.string() : "";
}

// Puts the complete checkpoint `staging` in place as `final_dir`. A checkpoint of the same step
// already there (a run resumed from an earlier one) is moved aside first and removed only once
// the new one has its name: a kill between the two renames leaves the old one complete under
// .replaced, which recover_replaced_checkpoints puts back.
void move_into_place(const fs::path& staging, const fs::path& final_dir, const std::string& output_dir, int64_t step,
                     const Ranks& ranks) {
  const fs::path aside = replaced_dir(output_dir, step);
  const bool replacing = fs::exists(final_dir);
  if (replacing) {
    fs::remove_all(aside);
    rename_file(final_dir.string(), aside.string());
    inject_faults(ranks, step, FaultPoint::kReplacingCheckpoint);
  }
  rename_file(staging.string(), final_dir.string());
  if (replacing) fs::remove_all(aside);
}

// Renamed first, so that a deletion cut short leaves a hidden directory, not a damaged checkpoint.
void remove_old_checkpoints(const std::string& output_dir, int64_t keep) {
  const auto all = checkpoints_by_step(output_dir);
  for (size_t i = 0; keep > 0 && i + static_cast<size_t>(keep) < all.size(); ++i) {
    const fs::path doomed = fs::path(output_dir) / ("." + fs::path(all[i]).filename().string() + ".removing");
    rename_file(all[i], doomed.string());
    fs::remove_all(doomed);
  }
}

bool is_other_ranks_file(const std::string& name, int rank) { return name.rfind("rank-", 0) == 0 && name != rank_file(rank); }

std::string crc_hex(uint32_t crc) {
  char text[9];
  std::snprintf(text, sizeof text, "%08x", crc);
  return text;
}

// Checksums of the files this rank wrote into `staging`: rank 0 all but the other ranks' own.
nlohmann::ordered_json checksum_own_files(const fs::path& staging, int rank) {
  nlohmann::ordered_json files = nlohmann::ordered_json::object();
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(staging)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    if (rank == 0 ? is_other_ranks_file(name, 0) : name != rank_file(rank)) continue;
    const FileChecksum sum = checksum_file((staging / name).string());
    files[name] = {{"bytes", sum.bytes}, {"crc32", crc_hex(sum.crc32)}};
  }
  return files;
}

// Every file of the checkpoint but checksums.json itself, from every rank's part.
std::string checksums_json(const std::vector<std::string>& parts_of_ranks) {
  nlohmann::ordered_json files = nlohmann::ordered_json::object();
  for (const std::string& part : parts_of_ranks) files.update(nlohmann::ordered_json::parse(part));
  return nlohmann::ordered_json{{"format", "mpibert-checkpoint-checksums"}, {"algorithm", "crc32"}, {"files", files}}.dump(2) +
         "\n";
}

// trainer_state.json's lr_scheduler, as lr_scheduler_record writes it.
nlohmann::ordered_json read_lr_scheduler(const JsonFields& fields, const JsonFields::Json& json) {
  const auto& record = fields.get(json, "", "lr_scheduler", JsonFields::Json::value_t::object);
  fields.text(record, "lr_scheduler", "lr_scheduler_type");
  fields.get(record, "lr_scheduler", "lr_scheduler_kwargs", JsonFields::Json::value_t::object);
  return record;
}

}  // namespace

nlohmann::ordered_json TrainerState::to_json(const nlohmann::ordered_json& model_config) const {
  nlohmann::ordered_json history = nlohmann::ordered_json::array();
  for (const auto& [step, loss] : loss_history) history.push_back({{"step", step}, {"loss", loss}});
  nlohmann::ordered_json json = {{"global_step", global_step},
                                 {"epoch", epoch},
                                 {"micro_batches_done_in_epoch", micro_batches_done},
                                 {"world_size", world_size},
                                 {"per_rank_batch_size", per_rank_batch_size},
                                 {"strategy", strategy},
                                 {"best_metric", best_metric ? nlohmann::ordered_json(*best_metric) : nlohmann::ordered_json()},
                                 {"best_metric_name", "eval_f1"},
                                 {"best_step", best_step},
                                 {"total_flos", total_flos},
                                 {"model_config", model_config},
                                 {"lr_scheduler", lr_scheduler},
                                 {"loss_history", history}};
  if (loss_scaler) {
    json["skipped_steps"] = skipped_steps;
    json["loss_scaler"] = {{"scale", loss_scaler->scale}, {"growth_tracker", loss_scaler->growth_tracker}};
  }
  return json;
}

nlohmann::ordered_json lr_scheduler_record(const LrScheduleParams& params) {
  return {{"lr_scheduler_type", lr_scheduler_type_name(params.type)}, {"lr_scheduler_kwargs", params.to_json()}};
}

void check_checkpoint_schedule(const std::string& dir, const TrainerState& saved, const nlohmann::ordered_json& schedule) {
  const nlohmann::ordered_json written = saved.lr_scheduler.is_null() ? lr_scheduler_record(LrScheduleParams{})
                                                                      : saved.lr_scheduler;
  if (written == schedule) return;
  auto spelled = [](const nlohmann::ordered_json& record) {
    return "--lr-scheduler-type " + record["lr_scheduler_type"].get<std::string>() + " --lr-scheduler-kwargs '" +
           record["lr_scheduler_kwargs"].dump() + "'";
  };
  throw InputError(describe(dir + "/trainer_state.json", "lr_scheduler",
                            "written by a run with " + spelled(written) + ", this run asks for " + spelled(schedule) +
                                ": resume with the schedule the run started with (the lr is a function of the step; "
                                "another one from here on is not the run that would have continued)"));
}

std::string checkpoint_dir(const std::string& output_dir, int64_t step) {
  return (fs::path(output_dir) / ("checkpoint-" + std::to_string(step))).string();
}

void remove_stale_checkpoint_work(const std::string& output_dir) {
  recover_replaced_checkpoints(output_dir);
  std::error_code ignored;
  for (const auto& entry : fs::directory_iterator(output_dir, ignored))
    if (is_hidden_checkpoint_work(entry.path().filename().string())) fs::remove_all(entry.path(), ignored);
}

void remove_every_checkpoint(const std::string& output_dir) {
  for (const std::string& checkpoint : checkpoints_by_step(output_dir)) fs::remove_all(checkpoint);
  std::error_code error;
  std::vector<fs::path> work;
  for (fs::directory_iterator entry(output_dir, error), end; !error && entry != end; entry.increment(error)) {
    const std::string name = entry->path().filename().string();
    if (is_hidden_checkpoint_work(name) || is_replaced_checkpoint(name)) work.push_back(entry->path());
  }
  for (const fs::path& path : work) fs::remove_all(path);
}

void recover_replaced_checkpoints(const std::string& output_dir) {
  std::error_code error;
  std::vector<fs::path> aside;
  for (fs::directory_iterator entry(output_dir, error), end; !error && entry != end; entry.increment(error))
    if (!replaced_from(entry->path()).empty()) aside.push_back(entry->path());
  for (const fs::path& path : aside) {
    const std::string original = replaced_from(path);
    if (fs::exists(original, error)) {
      fs::remove_all(path, error);  // the new save took its name: the old one is done with
    } else if (!error) {
      rename_file(path.string(), original);
      spdlog::warn("{}: put back from {}, where a save of the same step killed half-way had left it", original, path.string());
    }
  }
}

std::vector<std::string> checkpoints_by_step(const std::string& output_dir) {
  // Never throws: --resume auto lists on every rank before the setup's agreement, and an output
  // directory that cannot be listed is reported there (check_output_dir_is_free), not here.
  std::vector<fs::path> found;
  std::error_code error;
  for (fs::directory_iterator entry(output_dir, error), end; !error && entry != end; entry.increment(error))
    if (entry->is_directory(error) && checkpoint_step(entry->path()) >= 0) found.push_back(entry->path());
  std::sort(found.begin(), found.end(),
            [](const fs::path& a, const fs::path& b) { return checkpoint_step(a) < checkpoint_step(b); });
  return {found.begin(), found.end()};
}

void save_training_checkpoint(const CheckpointContext& context, QuestionAnsweringModel& model, DataParallel& parallel,
                              const TrainerState& state, const torch::Device& device) {
  const Ranks ranks{context.rank, context.world_size};
  const fs::path final_dir = checkpoint_dir(context.output_dir, state.global_step);
  const fs::path staging = staging_dir(context.output_dir, state.global_step);
  const WholeParameters whole(parallel);  // fsdp: rank 0 writes the model whole
  try {
    agree_on(ranks, [&] {
      if (!ranks.root()) return;
      remove_stale_checkpoint_work(context.output_dir);
      fs::create_directories(staging);
    });
    agree_on(ranks, [&] {
      if (ranks.root()) {
        save_pretrained(model, staging.string(), context.tokenizer);
        if (!parallel.optimizer_state_is_sharded())
          write_safetensors((staging / kOptimizerFile).string(), parallel.optimizer_state());
        write_file_atomic((staging / "trainer_state.json").string(), state.to_json(model.config_json()).dump(2) + "\n");
      }
      std::vector<NamedTensor> own = {{"cpu_rng_state", rng_state(torch::kCPU)}};
      if (device.is_cuda()) own.push_back({"cuda_rng_state", rng_state(device)});
      if (parallel.optimizer_state_is_sharded())
        for (auto& tensor : parallel.optimizer_state()) own.push_back(tensor);
      write_safetensors((staging / rank_file(context.rank)).string(), own);
    });
    // Every part is written: each rank sums its own files (in parallel), rank 0 records them all.
    std::string own_sums;
    agree_on(ranks, [&] { own_sums = checksum_own_files(staging, context.rank).dump(); });
    const std::vector<std::string> sums = ranks.size > 1 ? all_gather_strings(own_sums) : std::vector<std::string>{own_sums};
    agree_on(ranks, [&] {
      if (!ranks.root()) return;
      write_file_atomic((staging / kCheckpointChecksumsName).string(), checksums_json(sums));
      move_into_place(staging, final_dir, context.output_dir, state.global_step, ranks);
      spdlog::info("checkpoint: {}", final_dir.string());
      remove_old_checkpoints(context.output_dir, context.save_total_limit);
    });
  } catch (...) {
    std::error_code ignored;
    if (ranks.root()) fs::remove_all(staging, ignored);  // the checkpoints before stay usable
    throw;
  }
}

std::map<std::string, FileChecksum> read_checkpoint_checksums(const std::string& path) {
  const JsonFields fields(path);
  const JsonFields::Json root = fields.parse_object();
  if (fields.text(root, "", "format") != "mpibert-checkpoint-checksums")
    fields.fail("format", "must be \"mpibert-checkpoint-checksums\"");
  if (fields.text(root, "", "algorithm") != "crc32") fields.fail("algorithm", "must be \"crc32\"");
  std::map<std::string, FileChecksum> sums;
  for (const auto& [name, entry] : fields.get(root, "", "files", JsonFields::Json::value_t::object).items()) {
    const std::string field = "files." + name;
    if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos || name == kCheckpointChecksumsName)
      fields.fail(field, "must name a file of the checkpoint");
    if (!entry.is_object()) fields.fail(field, "must be an object");
    FileChecksum sum;
    sum.bytes = fields.integer<int64_t>(entry, field, "bytes");
    const std::string crc = fields.text(entry, field, "crc32");
    if (crc.size() != 8 || crc.find_first_not_of("0123456789abcdef") != std::string::npos)
      fields.fail(field + ".crc32", "must be 8 lower-case hex digits");
    sum.crc32 = static_cast<uint32_t>(std::stoul(crc, nullptr, 16));
    sums[name] = sum;
  }
  return sums;
}

void verify_checkpoint(const std::string& dir, int rank) {
  const std::string list = dir + "/" + kCheckpointChecksumsName;
  if (!fs::exists(list))
    throw InputError(describe(list, "", "missing: the checkpoint is incomplete (its save did not finish) or not mpibert's"));
  const auto sums = read_checkpoint_checksums(list);
  // Sharded optimizer state lives in the ranks' files, and a rank may read any of them (another
  // number of ranks resharding it): every rank checks every file.
  const bool sharded = !sums.count(kOptimizerFile);
  for (const auto& [name, expected] : sums) {
    if (!sharded && is_other_ranks_file(name, rank)) continue;
    const std::string path = dir + "/" + name;
    if (!fs::exists(path))
      throw InputError(describe(path, "", "missing (" + std::string(kCheckpointChecksumsName) + " lists it)"));
    const FileChecksum found = checksum_file(path);
    if (found.bytes != expected.bytes)
      throw InputError(describe(path, "",
                                "has " + std::to_string(found.bytes) + " bytes, " + kCheckpointChecksumsName + " says " +
                                    std::to_string(expected.bytes) + ": cut short or overwritten"));
    if (found.crc32 != expected.crc32)
      throw InputError(describe(path, "",
                                "CRC-32 " + crc_hex(found.crc32) + ", " + kCheckpointChecksumsName + " says " +
                                    crc_hex(expected.crc32) + ": the file is damaged"));
  }
}

TrainerState read_trainer_state(const std::string& path) {
  const JsonFields fields(path);
  const JsonFields::Json json = fields.parse_object();
  TrainerState state;
  state.global_step = fields.integer<int64_t>(json, "", "global_step");
  state.epoch = fields.integer<int64_t>(json, "", "epoch");
  state.micro_batches_done = fields.integer<int64_t>(json, "", "micro_batches_done_in_epoch");
  state.world_size = fields.integer<int>(json, "", "world_size", 1);
  state.strategy = fields.text(json, "", "strategy");
  if (json.contains("per_rank_batch_size"))
    state.per_rank_batch_size = fields.integer<int64_t>(json, "", "per_rank_batch_size", 1);
  const auto& history = fields.get(json, "", "loss_history", JsonFields::Json::value_t::array);
  for (size_t i = 0; i < history.size(); ++i) {
    const std::string entry = "loss_history[" + std::to_string(i) + "]";
    if (!history[i].is_object()) fields.fail(entry, "must be an object");
    state.loss_history.emplace_back(fields.integer<int64_t>(history[i], entry, "step"), fields.number(history[i], entry, "loss"));
  }
  if (json.contains("best_metric") && !json["best_metric"].is_null()) state.best_metric = fields.number(json, "", "best_metric");
  if (json.contains("best_step")) state.best_step = fields.integer<int64_t>(json, "", "best_step", -1);
  if (json.contains("total_flos")) state.total_flos = fields.number(json, "", "total_flos");
  if (json.contains("lr_scheduler") && !json["lr_scheduler"].is_null()) state.lr_scheduler = read_lr_scheduler(fields, json);
  if (json.contains("loss_scaler")) {
    const auto& scaler = fields.get(json, "", "loss_scaler", JsonFields::Json::value_t::object);
    LossScalerState loss_scaler;
    loss_scaler.scale = fields.number(scaler, "loss_scaler", "scale");
    loss_scaler.growth_tracker = fields.integer<int64_t>(scaler, "loss_scaler", "growth_tracker", 0);
    if (!(loss_scaler.scale > 0) || !std::isfinite(loss_scaler.scale))
      fields.fail("loss_scaler.scale", "must be positive and finite");
    state.loss_scaler = loss_scaler;
    state.skipped_steps = fields.integer<int64_t>(json, "", "skipped_steps", 0);
  }
  return state;
}

std::string checkpoint_to_resume(const CheckpointContext& context, const std::string& resume) {
  const Ranks ranks{context.rank, context.world_size};
  if (resume.empty()) return "";
  // A save killed while replacing a checkpoint of its step left the old one aside: put back
  // before any rank looks (agree_on orders rank 0's renames before the others' reads).
  agree_on(ranks, [&] {
    if (ranks.root()) recover_replaced_checkpoints(context.output_dir);
  });
  if (resume != "auto") {
    agree_on(ranks, [&] { verify_checkpoint(resume, ranks.rank); });
    return resume;
  }
  // Rank 0's list: every rank tries the same checkpoints in the same order.
  std::string listed;
  for (const std::string& dir : checkpoints_by_step(context.output_dir)) listed += dir + "\n";
  if (ranks.size > 1) listed = broadcast_string(listed, 0, "the list of checkpoints in " + context.output_dir);
  std::vector<std::string> candidates;
  std::istringstream lines(listed);
  for (std::string dir; std::getline(lines, dir);) candidates.push_back(dir);
  for (auto dir = candidates.rbegin(); dir != candidates.rend(); ++dir) {
    std::string problem;
    try {
      verify_checkpoint(*dir, ranks.rank);
    } catch (const std::exception& error) {
      problem = error.what();
    }
    const int failing = ranks.size > 1 ? lowest_failing_rank(problem.empty()) : (problem.empty() ? -1 : 0);
    if (failing < 0) return *dir;
    if (failing == ranks.rank) spdlog::warn("--resume auto: {} refused: {}; trying the checkpoint before it", *dir, problem);
  }
  if (candidates.empty()) return "";
  if (ranks.root())
    throw InputError(describe(context.output_dir, "",
                              "--resume auto: none of its " + std::to_string(candidates.size()) +
                                  " checkpoints is intact (each refused above)"));
  throw PeerFailure("rank 0 found no intact checkpoint");
}

void restore_rng_state(const torch::Device& device, const SafetensorsFile& file, const std::string& name) {
  const torch::Tensor state = file.get(name);
  const torch::Tensor expected = rng_state(device);
  if (state.scalar_type() != expected.scalar_type() || state.sizes() != expected.sizes())
    throw InputError(describe(file.path(), name,
                              std::string("is not a ") + (device.is_cuda() ? "CUDA" : "CPU") + " RNG state (" +
                                  c10::toString(state.scalar_type()) + " " + c10::str(state.sizes()) + ", expected " +
                                  c10::toString(expected.scalar_type()) + " " + c10::str(expected.sizes()) + ")"));
  try {
    set_rng_state(device, state);
  } catch (const c10::Error& error) {
    throw InputError(describe(file.path(), name, std::string("refused as an RNG state: ") + error.what_without_backtrace()));
  }
}

namespace {

// Where this run's ranks continue in the epoch: the samples the checkpoint's ranks consumed, in
// micro-batches of this run's global size (the epoch's order is one permutation whatever the
// number of ranks, and each global micro-batch takes the next run of it: sampler.hpp).
int64_t micro_batches_done_here(const std::string& dir, const TrainerState& saved, const CheckpointContext& context) {
  const int64_t here = context.per_rank_batch_size * context.world_size;
  if (saved.per_rank_batch_size == 0) {  // written before checkpoints recorded their batch size
    if (saved.world_size != context.world_size)
      throw InputError(describe(dir, "trainer_state.json",
                                "written by a run of " + std::to_string(saved.world_size) +
                                    " ranks without its batch size: resume it with the same number of ranks"));
    return saved.micro_batches_done;
  }
  const int64_t there = saved.per_rank_batch_size * saved.world_size;
  if (there == here) return saved.micro_batches_done;
  const int64_t samples = saved.micro_batches_done * there;
  if (samples % here != 0)
    throw InputError(describe(dir, "trainer_state.json",
                              std::to_string(saved.world_size) + " ranks x batch " + std::to_string(saved.per_rank_batch_size) +
                                  " consumed " + std::to_string(samples) +
                                  " samples of the epoch, not a multiple of this run's " + std::to_string(context.world_size) +
                                  " x " + std::to_string(context.per_rank_batch_size) +
                                  ": choose --batch-size so that ranks x batch divides it"));
  spdlog::warn(
      "{}: written with {} ranks x batch {}, resumed with {} x {}: another global micro-batch, so not the run that "
      "would have continued (the same global batch per step gives that)",
      dir, saved.world_size, saved.per_rank_batch_size, context.world_size, context.per_rank_batch_size);
  return samples / here;
}

}  // namespace

TrainerState load_training_checkpoint_model(const std::string& dir, const CheckpointContext& context,
                                            QuestionAnsweringModel& model) {
  TrainerState state = read_trainer_state(dir + "/trainer_state.json");
  state.micro_batches_done = micro_batches_done_here(dir, state, context);
  if (state.world_size != context.world_size || state.strategy != context.strategy)
    spdlog::info("{}: written by {} ranks ({}), resharded for {} ranks ({})", dir, state.world_size, state.strategy,
                 context.world_size, context.strategy);
  const std::string config_path = dir + "/config.json";
  const nlohmann::json saved = read_json_file(config_path);
  if (const std::string type = resolve_model_type(saved, config_path); type != model.model_type())
    throw InputError(describe(dir, "", "checkpoint of another model: " + type + " (this run: " + model.model_type() + ")"));
  if (std::string mismatch = model.shape_mismatch(saved, config_path); !mismatch.empty())
    throw InputError(describe(dir, "", "checkpoint of another model shape: " + mismatch));
  if (!context.tokenizer.empty() && HfTokenizer::load(dir).digest() != HfTokenizer::load(context.tokenizer).digest())
    throw InputError(describe(dir, "",
                              "checkpoint trained with another tokenizer than " + context.tokenizer + " (its own is there)"));
  model.load_state(SafetensorsFile::open(dir + "/model.safetensors"));
  return state;
}

void load_training_checkpoint_rest(const std::string& dir, const CheckpointContext& context, int saved_world_size,
                                   DataParallel& parallel, const torch::Device& device) {
  // Unsharded state is one file; sharded state is in every rank's file of the run that wrote it.
  std::vector<SafetensorsFile> optimizer_files;
  if (fs::exists(dir + "/" + kOptimizerFile)) {
    optimizer_files.push_back(SafetensorsFile::open(dir + "/" + kOptimizerFile));
  } else {
    for (int r = 0; r < saved_world_size; ++r) optimizer_files.push_back(SafetensorsFile::open(dir + "/" + rank_file(r)));
  }
  parallel.load_optimizer_state(optimizer_files);
  const std::string own_path = dir + "/" + rank_file(context.rank);
  if (context.rank >= saved_world_size) {
    spdlog::warn(
        "{}: written by {} ranks, none of them this rank {}: its RNG stays as seeded (dropout masks differ from "
        "the run that was not stopped)",
        dir, saved_world_size, context.rank);
    return;
  }
  SafetensorsFile own = SafetensorsFile::open(own_path);
  restore_rng_state(torch::kCPU, own, "cpu_rng_state");
  if (device.is_cuda()) {
    if (own.find("cuda_rng_state")) {
      restore_rng_state(device, own, "cuda_rng_state");
    } else {
      spdlog::warn("{}: written on a CPU, no CUDA RNG state: dropout masks will differ from an uninterrupted GPU run", own_path);
    }
  }
}

}  // namespace mpibert
