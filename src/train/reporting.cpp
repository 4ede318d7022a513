#include "mpibert/train/reporting.hpp"

#include <spdlog/spdlog.h>

#include <cstdlib>
#include <filesystem>
#include <map>

#include "mpibert/core/error.hpp"
#include "mpibert/core/io.hpp"
#include "mpibert/report/mlflow_tracker.hpp"
#include "mpibert/report/report_to.hpp"
#include "mpibert/report/wandb_companion.hpp"
#include "mpibert/train/tensorboard.hpp"

namespace fs = std::filesystem;

namespace mpibert {
namespace {

constexpr const char* kReportFile = "report.json";

// TensorBoard's scalars of a metrics line: train/NAME for a step's, eval/NAME for an evaluation's
// loss and scores (the names TensorBoard users of mpibert know).
class TensorBoardTracker : public Tracker {
 public:
  // `model_type` and `architecture`: the model the run trains (config.json's, whether or not
  // --model-type named it), so that the hparams name the family.
  TensorBoardTracker(const TrainOptions& options, const std::string& model_type, const std::string& architecture)
      : writer_(options.output_dir + "/tensorboard") {
    nlohmann::ordered_json args;
    std::map<std::string, TensorBoardWriter::HParam> hparams;
    auto add = [&](const std::string& name, const nlohmann::ordered_json& json) {
      args[name] = json;
      if (json.is_boolean())
        hparams[name] = json.get<bool>();
      else if (json.is_number())
        hparams[name] = json.get<double>();
      else
        hparams[name] = json.is_string() ? json.get<std::string>() : json.dump();
    };
    for_each_train_option(options,
                          [&](const TrainOptionField& field, const auto& value) { add(field.name, option_json(value)); });
    add("model_type", model_type);
    add("architecture", architecture);
    writer_.add_text("args", args.dump(2));
    writer_.add_hparams(hparams);
    writer_.flush();
  }
  std::string name() const override { return "tensorboard"; }
  void log(const MetricRecord& record) override {
    const auto& line = record.line;
    const int64_t step = record.step();
    if (record.kind == MetricRecord::Kind::kTrain) {
      for (const char* key : {"loss", "learning_rate", "grad_norm", "samples_per_second", "step_time", "loss_scale"})
        if (line.contains(key)) writer_.add_scalar(std::string("train/") + key, line[key].get<double>(), step);
      return;
    }
    for (const char* key : {"loss", "exact_match", "exact", "f1", "best_f1"})
      if (line.contains(std::string("eval_") + key))
        writer_.add_scalar(std::string("eval/") + key, line[std::string("eval_") + key].get<double>(), step);
  }
  void flush() override { writer_.flush(); }
  std::string finish(const nlohmann::ordered_json&, RunEnd) override {
    writer_.flush();
    return "";
  }

 private:
  TensorBoardWriter writer_;
};

}  // namespace

std::string hf_option_name(const TrainOptionField& field) {
  const std::string flags = field.flags;
  for (size_t begin = 0; begin < flags.size();) {
    size_t end = flags.find(',', begin);
    if (end == std::string::npos) end = flags.size();
    const std::string spelling = flags.substr(begin, end - begin);
    if (spelling.find('_') != std::string::npos) return spelling.substr(spelling.find_first_not_of('-'));
    begin = end + 1;
  }
  return field.name;
}

nlohmann::ordered_json tracker_params(const TrainOptions& options, const nlohmann::ordered_json& model_config,
                                      const nlohmann::ordered_json& resolved) {
  nlohmann::ordered_json params = model_config.is_object() ? model_config : nlohmann::ordered_json::object();
  for_each_train_option(options, [&](const TrainOptionField& field, const auto& value) {
    params[hf_option_name(field)] = option_json(value);
  });
  for (const auto& [key, value] : resolved.items()) params[key] = value;
  return params;
}

nlohmann::ordered_json earlier_trackers(const std::string& output_dir) {
  const std::string path = output_dir + "/" + kReportFile;
  if (!fs::exists(path)) return nlohmann::ordered_json::object();
  const auto record = nlohmann::ordered_json::parse(read_file(path), nullptr, /*allow_exceptions=*/false);
  if (!record.is_object() || !record.contains("trackers") || !record["trackers"].is_object()) {
    spdlog::warn("{}: not a report record; the trackers' runs of the earlier job are not continued", path);
    return nlohmann::ordered_json::object();
  }
  return record["trackers"];
}

namespace {

// HF's switches that turn an integration off: `all` leaves it out, naming it refuses the run.
bool switched_off(bool named, const char* tracker, const char* variable) {
  if (!environment_true(variable)) return false;
  if (named)
    throw InputError(std::string("--report-to ") + tracker + ": " + variable + " is set, which turns " + tracker +
                     " off: unset it, or leave " + tracker + " out of --report-to");
  spdlog::info("--report-to all: not reporting to {}: {} is set", tracker, variable);
  return true;
}

}  // namespace

Trackers connect_remote_trackers(const TrainOptions& options, const RunDescription& run, const std::string& program) {
  ReportTo to = parse_report_to(options.report_to, train_option_field(options, options.report_to).flag());
  Trackers trackers;
  const char* uri = std::getenv("MLFLOW_TRACKING_URI");
  const bool mlflow_off = (to.mlflow || to.all) && switched_off(to.mlflow, "mlflow", "DISABLE_MLFLOW_INTEGRATION");
  const bool wandb_off = (to.wandb || to.all) && switched_off(to.wandb, "wandb", "WANDB_DISABLED");
  if (mlflow_off) to.mlflow = false;
  if (wandb_off) to.wandb = false;
  if (to.mlflow || (to.all && !mlflow_off && uri && *uri)) {
    const MlflowSettings settings = MlflowSettings::from_environment();
    check_mlflow_server(settings);
    trackers.add(connect_mlflow(settings, run));
  } else if (to.all && !mlflow_off) {
    spdlog::info("--report-to all: not reporting to MLflow: MLFLOW_TRACKING_URI is not set");
  }
  if (to.wandb || (to.all && !wandb_off)) {
    const auto command = find_companion(program);
    if (!command && to.wandb)
      throw InputError(
          "--report-to wandb: the companion mpibert-report is not found (MPIBERT_REPORT, mpibert-report on PATH, or "
          "tools/report beside a build tree): pip install './tools[trackers]' (docs/training.md, \"Reporting to Weights & "
          "Biases\")");
    if (!command) spdlog::info("--report-to all: not reporting to W&B: the companion mpibert-report is not found");
    if (command)
      if (auto companion = start_wandb_companion(*command, run, /*required=*/to.wandb)) trackers.add(std::move(companion));
  }
  return trackers;
}

std::unique_ptr<Tracker> make_tensorboard_tracker(const TrainOptions& options, const std::string& model_type,
                                                  const std::string& architecture) {
  const ReportTo to = parse_report_to(options.report_to, train_option_field(options, options.report_to).flag());
  if (!to.tensorboard) return nullptr;
  return std::make_unique<TensorBoardTracker>(options, model_type, architecture);
}

void write_report_file(const RunDescription& run, const Trackers& trackers, const char* end) {
  nlohmann::ordered_json record = {{"run_name", run.run_name}, {"params", run.params}, {"tags", run.tags}};
  // Trackers this job did not report to keep the earlier job's records (a run sent afterwards).
  nlohmann::ordered_json kept = run.earlier.is_object() ? run.earlier : nlohmann::ordered_json::object();
  const nlohmann::ordered_json records = trackers.records();
  for (const auto& [name, entry] : records.items()) kept[name] = entry;
  record["trackers"] = kept;
  if (end) record["end"] = end;
  write_file_atomic(run.output_dir + "/" + kReportFile, record.dump(2) + "\n");
}

}  // namespace mpibert
