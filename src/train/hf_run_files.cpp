#include "mpibert/train/hf_run_files.hpp"
#include "mpibert/text/hf_tokenizer.hpp"

#include <cmath>
#include <filesystem>
#include <map>
#include <sstream>
#include <system_error>

#include "mpibert/core/error.hpp"
#include "mpibert/core/io.hpp"

namespace fs = std::filesystem;

namespace mpibert {
namespace {

// The keys of HF's train_results.json (Trainer.train's metrics plus run_qa's train_samples).
constexpr const char* kTrainKeys[] = {
    "epoch", "total_flos", "train_loss", "train_runtime", "train_samples", "train_samples_per_second", "train_steps_per_second"};

bool is_eval_key(const std::string& key) { return key.rfind("eval_", 0) == 0; }

// nlohmann::json (not ordered) keeps object keys sorted: HF writes its files with sort_keys=True.
nlohmann::json train_metrics(const nlohmann::ordered_json& results) {
  nlohmann::json out = nlohmann::json::object();
  for (const char* key : kTrainKeys)
    if (results.contains(key)) out[key] = results[key];
  return out;
}

nlohmann::json eval_metrics(const nlohmann::ordered_json& results) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [key, value] : results.items())
    if (is_eval_key(key)) out[key] = value;
  if (!out.empty() && results.contains("epoch")) out["epoch"] = results["epoch"];
  return out;
}

struct MetricsLines {
  std::map<int64_t, nlohmann::json> train, eval;  // by step; a later line of the same step replaces an earlier one
};

// metrics.jsonl's step and evaluation lines. A line cut short (a run killed while writing it) is
// skipped: its step was run again after the resume.
MetricsLines read_metrics_lines(const std::string& path) {
  MetricsLines lines;
  if (!fs::exists(path)) return lines;
  std::istringstream text(read_file(path));
  for (std::string line; std::getline(text, line);) {
    const nlohmann::json record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!record.is_object() || !record.contains("step") || !record["step"].is_number_integer()) continue;
    const int64_t step = record["step"];
    bool evaluation = false;
    for (const auto& [key, value] : record.items()) evaluation = evaluation || is_eval_key(key);
    const bool training = !evaluation && record.contains("loss") && record["loss"].is_number() && record.contains("grad_norm") &&
                          record.contains("learning_rate") && record.contains("epoch");
    if (evaluation) lines.eval[step] = record;
    if (training) lines.train[step] = record;
  }
  return lines;
}

double round_to(double value, int digits) {
  const double scale = std::pow(10.0, digits);
  return std::round(value * scale) / scale;
}

// HF's logging entry at `step`: the mean loss over the steps since the previous entry.
std::optional<nlohmann::json> logging_entry(const MetricsLines& lines, int64_t previous, int64_t step) {
  const auto at = lines.train.find(step);
  if (at == lines.train.end()) return std::nullopt;
  double loss_sum = 0;
  int64_t counted = 0;
  for (auto it = lines.train.upper_bound(previous); it != lines.train.end() && it->first <= step; ++it, ++counted)
    loss_sum += it->second.at("loss").get<double>();
  const nlohmann::json& line = at->second;
  return nlohmann::json{{"epoch", line.at("epoch")},
                        {"grad_norm", line.at("grad_norm")},
                        {"learning_rate", line.at("learning_rate")},
                        {"loss", round_to(loss_sum / static_cast<double>(counted), 4)},
                        {"step", step}};
}

nlohmann::json evaluation_entry(nlohmann::json line, int64_t steps_per_epoch) {
  const int64_t step = line.at("step");
  line["epoch"] = static_cast<double>(step) / static_cast<double>(steps_per_epoch);
  return line;
}

void write_json_atomic(const std::string& path, const nlohmann::json& value, int indent) {
  write_file_atomic(path, value.dump(indent) + "\n");
}

// `target` made to be `source`'s content under `target`'s name, atomically.
void link_or_copy(const fs::path& source, const fs::path& target) {
  const std::string staging = temporary_path_for(target.string());
  std::error_code error;
  fs::create_hard_link(source, staging, error);
  if (error) fs::copy_file(source, staging, fs::copy_options::overwrite_existing, error);
  if (error) {
    remove_quietly(staging);
    throw InputError(describe(target.string(), "", "cannot link or copy " + source.string() + ": " + error.message()));
  }
  rename_file(staging, target.string());
}

}  // namespace

nlohmann::json hf_log_history(const std::string& metrics_jsonl, int64_t logging_steps, int64_t steps_per_epoch,
                              int64_t last_training_step, const nlohmann::ordered_json& results) {
  const MetricsLines lines = read_metrics_lines(metrics_jsonl);
  nlohmann::json history = nlohmann::json::array();
  int64_t previous_log = 0;
  for (int64_t step = 1; step <= last_training_step; ++step) {
    if (logging_steps > 0 && step % logging_steps == 0) {
      if (auto entry = logging_entry(lines, previous_log, step)) history.push_back(*entry);
      previous_log = step;
    }
    // The evaluation at the last step comes after the summary, as run_qa's evaluation after training.
    if (const auto evaluation = lines.eval.find(step); evaluation != lines.eval.end() && step < last_training_step)
      history.push_back(evaluation_entry(evaluation->second, steps_per_epoch));
  }
  nlohmann::json summary = train_metrics(results);
  summary.erase("train_samples");  // run_qa adds train_samples to the saved metrics, not to the log
  summary["step"] = last_training_step;
  history.push_back(summary);
  if (const auto evaluation = lines.eval.find(last_training_step); evaluation != lines.eval.end())
    history.push_back(evaluation_entry(evaluation->second, steps_per_epoch));
  return history;
}

void write_hf_run_files(const std::string& run_dir, const nlohmann::ordered_json& results, const HfTrainerState& state,
                        const nlohmann::json& log_history) {
  const nlohmann::json train = train_metrics(results), eval = eval_metrics(results);
  nlohmann::json all = train;
  all.update(eval);
  write_json_atomic(run_dir + "/train_results.json", train, 4);
  if (!eval.empty()) write_json_atomic(run_dir + "/eval_results.json", eval, 4);
  write_json_atomic(run_dir + "/all_results.json", all, 4);

  auto or_null = [](bool present, const nlohmann::json& value) { return present ? value : nlohmann::json(); };
  const nlohmann::json trainer_state = {
      {"best_global_step", or_null(state.best_global_step >= 0, state.best_global_step)},
      {"best_metric", or_null(state.best_metric.has_value(), state.best_metric.value_or(0.0))},
      {"best_model_checkpoint", or_null(!state.best_model_checkpoint.empty(), state.best_model_checkpoint)},
      {"epoch", state.epoch},
      {"eval_steps", state.eval_steps},
      {"global_step", state.global_step},
      {"is_hyper_param_search", false},
      {"is_local_process_zero", true},
      {"is_world_process_zero", true},
      {"log_history", log_history},
      {"logging_steps", state.logging_steps},
      {"max_steps", state.max_steps},
      {"num_input_tokens_seen", 0},
      {"num_train_epochs", state.num_train_epochs},
      {"save_steps", state.save_steps},
      {"stateful_callbacks", nlohmann::json::object()},
      {"total_flos", state.total_flos},
      {"train_batch_size", state.train_batch_size},
      {"trial_name", nullptr},
      {"trial_params", nullptr}};
  write_json_atomic(run_dir + "/trainer_state.json", trainer_state, 2);
}

void publish_final_model(const std::string& run_dir, const std::string& checkpoint_dir) {
  std::vector<std::string> names = {"config.json", "model.safetensors"};
  names.insert(names.end(), tokenizer_file_names().begin(), tokenizer_file_names().end());
  for (const std::string& name : names) {
    const fs::path source = fs::path(checkpoint_dir) / name;
    if (fs::exists(source)) link_or_copy(source, fs::path(run_dir) / name);
  }
}

}  // namespace mpibert
