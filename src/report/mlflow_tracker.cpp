#include "mpibert/report/mlflow_tracker.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <set>

#include "mpibert/core/error.hpp"
#include "mpibert/report/report_to.hpp"
#include "mpibert/report/send_queue.hpp"

namespace mpibert {
namespace {

constexpr const char* kApi = "/api/2.0/mlflow";
// MLflow's limits on one log-batch request and on a parameter's value (mlflow.utils.validation).
constexpr size_t kParamsOrTagsPerBatch = 100, kMetricsPerBatch = 1000, kLongestParamValue = 6000;

std::string environment(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// An answer of the server that is not the one asked for.
struct ApiError : std::runtime_error {
  HttpResponse response;
  std::string code;  // MLflow's error_code ("RESOURCE_DOES_NOT_EXIST"), "" without one
  explicit ApiError(HttpResponse answer) : std::runtime_error(answer.describe()), response(std::move(answer)) {
    if (response.answered()) {
      const auto body = nlohmann::json::parse(response.body, nullptr, /*allow_exceptions=*/false);
      if (body.is_object() && body.contains("error_code") && body["error_code"].is_string()) code = body["error_code"];
    }
  }
};

// The REST calls of the setup and the end, one at a time.
class MlflowApi {
 public:
  explicit MlflowApi(const MlflowSettings& settings) : settings_(settings), http_(settings.http) {}
  nlohmann::json get(const std::string& path) { return answer(http_.get(kApi + path)); }
  nlohmann::json post(const std::string& path, const nlohmann::json& body) {
    return answer(http_.post_json(kApi + path, body.dump()));
  }
  std::string escape(const std::string& value) const { return http_.escape(value); }
  // "--report-to mlflow: the tracking server http://host (MLFLOW_TRACKING_URI) ...": what a refusal says first.
  std::string where() const {
    return "--report-to mlflow: the tracking server " + settings_.shown_uri() + " (MLFLOW_TRACKING_URI)";
  }

 private:
  static nlohmann::json answer(HttpResponse response) {
    if (!response.ok()) throw ApiError(std::move(response));
    return nlohmann::json::parse(response.body.empty() ? "{}" : response.body);
  }
  const MlflowSettings& settings_;
  HttpClient http_;
};

[[noreturn]] void refuse(const MlflowApi& api, const std::string& what, const ApiError& error) {
  if (!error.response.answered())
    throw InputError(api.where() + " cannot be reached (" + error.response.error +
                     "): start it (docs/training.md, \"Reporting to MLflow\") or point MLFLOW_TRACKING_URI at it; or leave "
                     "mlflow out of --report-to and send the run afterwards with mpibert-report mlflow RUN_DIR");
  if (error.response.status == 401 || error.response.status == 403)
    throw InputError(api.where() + " refused the credentials " + what +
                     " (MLFLOW_TRACKING_TOKEN, or MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD): " + error.what());
  throw InputError(api.where() + " refused " + what + ": " + error.what());
}

std::string param_value(const nlohmann::ordered_json& value) {
  return value.is_string() ? value.get<std::string>() : value.dump();
}

nlohmann::json key_values(const std::vector<std::pair<std::string, std::string>>& pairs, size_t begin, size_t end) {
  nlohmann::json list = nlohmann::json::array();
  for (size_t i = begin; i < end; ++i) list.push_back({{"key", pairs[i].first}, {"value", pairs[i].second}});
  return list;
}

// The run's experiment: MLFLOW_EXPERIMENT_NAME (made when missing), MLFLOW_EXPERIMENT_ID, or Default ("0").
std::string experiment_id(MlflowApi& api, const MlflowSettings& settings) {
  if (settings.experiment_name.empty()) return settings.experiment_id.empty() ? "0" : settings.experiment_id;
  const std::string name = settings.experiment_name;
  try {
    const auto found = api.get("/experiments/get-by-name?experiment_name=" + api.escape(name));
    if (found["experiment"].value("lifecycle_stage", "active") == "deleted")
      throw InputError(api.where() + ": the experiment " + name +
                       " (MLFLOW_EXPERIMENT_NAME) is deleted: restore it (mlflow experiments restore) or name another");
    return found["experiment"]["experiment_id"].get<std::string>();
  } catch (const ApiError& error) {
    if (error.code != "RESOURCE_DOES_NOT_EXIST") refuse(api, "the experiment " + name + " (MLFLOW_EXPERIMENT_NAME)", error);
  }
  try {
    return api.post("/experiments/create", {{"name", name}})["experiment_id"].get<std::string>();
  } catch (const ApiError& error) {  // made meanwhile by another job
    if (error.code != "RESOURCE_ALREADY_EXISTS")
      refuse(api, "making the experiment " + name + " (MLFLOW_EXPERIMENT_NAME)", error);
    return api.get("/experiments/get-by-name?experiment_name=" + api.escape(name))["experiment"]["experiment_id"];
  }
}

nlohmann::json get_run(MlflowApi& api, const std::string& run_id, const std::string& named_by) {
  try {
    nlohmann::json run = api.get("/runs/get?run_id=" + api.escape(run_id))["run"];
    if (run["info"].value("lifecycle_stage", "active") == "deleted")
      throw InputError(api.where() + ": the run " + run_id + " (" + named_by + ") is deleted");
    return run;
  } catch (const ApiError& error) {
    if (error.code == "RESOURCE_DOES_NOT_EXIST") throw InputError(api.where() + " has no run " + run_id + " (" + named_by + ")");
    refuse(api, "the run " + run_id + " (" + named_by + ")", error);
  }
}

class MlflowTracker : public Tracker {
 public:
  MlflowTracker(const MlflowSettings& settings, std::string experiment, std::string run_id)
      : settings_(settings), experiment_id_(std::move(experiment)), run_id_(std::move(run_id)) {
    auto http = std::make_shared<HttpClient>(settings_.http);
    const std::string run = run_id_;
    queue_ = std::make_unique<SendQueue>(
        [http, run](const std::vector<nlohmann::json>& batch) {
          const nlohmann::json body = {{"run_id", run}, {"metrics", batch}};
          const HttpResponse response = http->post_json(std::string(kApi) + "/runs/log-batch", body.dump());
          if (response.ok()) return SendResult{SendResult::Outcome::kSent, ""};
          const bool later = !response.answered() || response.status >= 500 || response.status == 429;
          return SendResult{later ? SendResult::Outcome::kRetry : SendResult::Outcome::kRejected, response.describe()};
        },
        SendQueueOptions{100000, kMetricsPerBatch}, [http] { http->cancel(); });
  }
  ~MlflowTracker() override {
    if (!finished_) finish(nlohmann::ordered_json::object(), RunEnd::kFailed);
  }

  std::string name() const override { return "mlflow"; }
  nlohmann::ordered_json record() const override {
    nlohmann::ordered_json record = {
        {"tracking_uri", settings_.shown_uri()}, {"experiment_id", experiment_id_}, {"run_id", run_id_}};
    if (finished_) record["unsent_values"] = unsent_;
    return record;
  }
  void log(const MetricRecord& record) override {
    nlohmann::json metrics = mlflow_metrics(record.line, record.step(), now_ms());
    for (const auto& metric : metrics) logged_keys_.insert(metric["key"].get<std::string>());
    queue_->push(metrics.get<std::vector<nlohmann::json>>());
  }
  std::string finish(const nlohmann::ordered_json& results, RunEnd end) override;

 private:
  MlflowSettings settings_;
  std::string experiment_id_, run_id_;
  std::unique_ptr<SendQueue> queue_;
  std::set<std::string> logged_keys_;
  bool finished_ = false;
  size_t unsent_ = 0;
};

// The results' numbers that no metrics line had (train_runtime, train_loss, total_flos, ...), at
// the last step; then the run's status.
std::string MlflowTracker::finish(const nlohmann::ordered_json& results, RunEnd end) {
  finished_ = true;
  if (results.is_object() && results.contains("global_step")) {
    nlohmann::ordered_json final_line = nlohmann::ordered_json::object();
    for (const auto& [key, value] : results.items())
      if (value.is_number() && key != "global_step" && !logged_keys_.count(key)) final_line[key] = value;
    const nlohmann::json metrics = mlflow_metrics(final_line, results["global_step"].get<int64_t>(), now_ms());
    queue_->push(metrics.get<std::vector<nlohmann::json>>());
  }
  // The whole end is bounded; the status keeps the last quarter, so that a server which hangs on
  // the metrics still hears how the run ended.
  const std::chrono::milliseconds allowed = end == RunEnd::kFailed ? settings_.failed_end_time : settings_.end_time;
  const auto deadline = std::chrono::steady_clock::now() + allowed;
  const SendQueue::Outcome outcome = queue_->finish(allowed - allowed / 4);
  unsent_ = outcome.unsent;
  std::string status_error;
  try {
    MlflowSettings settings = settings_;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    settings.http.timeout_ms = std::max<long>(1, static_cast<long>(left));  // 0 would be no timeout at all
    settings.http.connect_timeout_ms = std::min(settings.http.connect_timeout_ms, settings.http.timeout_ms);
    MlflowApi api(settings);
    const char* status = end == RunEnd::kCompleted ? "FINISHED" : end == RunEnd::kStopped ? "KILLED" : "FAILED";
    api.post("/runs/update", {{"run_id", run_id_}, {"status", status}, {"end_time", now_ms()}});
  } catch (const std::exception& error) {
    status_error = error.what();
  }
  if (unsent_ == 0 && status_error.empty()) return "";
  std::string note = "mlflow: run " + run_id_ + " at " + settings_.shown_uri() + ": ";
  if (unsent_ > 0)
    note += std::to_string(unsent_) + " of " + std::to_string(outcome.sent + unsent_) + " metric values not sent (" +
            outcome.last_error + ")";
  if (!status_error.empty()) note += std::string(unsent_ > 0 ? "; " : "") + "its status not set (" + status_error + ")";
  return note + ": send them with `mpibert-report mlflow " + "RUN_DIR`";
}

std::vector<std::pair<std::string, std::string>> params_to_send(const nlohmann::ordered_json& params,
                                                                const nlohmann::json& earlier_params) {
  std::map<std::string, std::string> there;
  for (const auto& param : earlier_params) there[param["key"]] = param["value"];
  std::vector<std::pair<std::string, std::string>> pairs;
  std::vector<std::string> changed;
  for (const auto& [key, value] : params.items()) {
    const std::string text = param_value(value);
    if (text.size() > kLongestParamValue) {
      spdlog::warn("mlflow: parameter {} not logged: its value has {} characters, MLflow takes {}", key, text.size(),
                   kLongestParamValue);
      continue;
    }
    const auto found = there.find(key);
    if (found == there.end())
      pairs.emplace_back(key, text);
    else if (found->second != text)
      changed.push_back(key + " (" + found->second + ", now " + text + ")");
  }
  if (!changed.empty()) {
    std::string list;
    for (const std::string& entry : changed) list += (list.empty() ? "" : ", ") + entry;
    spdlog::warn("mlflow: the run keeps its first values of parameters this job changed (MLflow's are set once): {}", list);
  }
  return pairs;
}

void log_params_and_tags(MlflowApi& api, const std::string& run_id,
                         const std::vector<std::pair<std::string, std::string>>& params,
                         const std::vector<std::pair<std::string, std::string>>& tags) {
  try {
    for (size_t i = 0; i < params.size(); i += kParamsOrTagsPerBatch)
      api.post("/runs/log-batch",
               {{"run_id", run_id}, {"params", key_values(params, i, std::min(params.size(), i + kParamsOrTagsPerBatch))}});
    for (size_t i = 0; i < tags.size(); i += kParamsOrTagsPerBatch)
      api.post("/runs/log-batch",
               {{"run_id", run_id}, {"tags", key_values(tags, i, std::min(tags.size(), i + kParamsOrTagsPerBatch))}});
  } catch (const ApiError& error) {
    refuse(api, "the parameters and tags of run " + run_id, error);
  }
}

}  // namespace

MlflowSettings MlflowSettings::from_environment() {
  MlflowSettings settings;
  settings.tracking_uri = environment("MLFLOW_TRACKING_URI");
  if (settings.tracking_uri.empty())
    throw InputError(
        "--report-to mlflow: MLFLOW_TRACKING_URI is not set: mpibert reports to an MLflow tracking server "
        "(http://HOST:PORT; docs/training.md, \"Reporting to MLflow\"); or leave mlflow out of --report-to and send the "
        "run afterwards with mpibert-report mlflow RUN_DIR");
  const std::string scheme = settings.tracking_uri.substr(0, settings.tracking_uri.find(':'));
  if (scheme != "http" && scheme != "https")
    throw InputError("--report-to mlflow: MLFLOW_TRACKING_URI=" + url_without_credentials(settings.tracking_uri) +
                     ": not a tracking server's http:// or https:// address: mpibert train speaks MLflow's REST API. For "
                     "a local store, serve it (mlflow server --backend-store-uri ...) or send the finished run with "
                     "mpibert-report mlflow RUN_DIR, which writes to any store MLflow's client knows");
  settings.experiment_name = environment("MLFLOW_EXPERIMENT_NAME");
  settings.experiment_id = environment("MLFLOW_EXPERIMENT_ID");
  settings.run_id = environment("MLFLOW_RUN_ID");
  settings.nested = environment_true("MLFLOW_NESTED_RUN");
  if (settings.nested && settings.run_id.empty())
    throw InputError(
        "--report-to mlflow: MLFLOW_NESTED_RUN is set, but a nested run needs its parent: give its id in MLFLOW_RUN_ID");
  if (const std::string tags = environment("MLFLOW_TAGS"); !tags.empty()) {
    settings.tags = nlohmann::ordered_json::parse(tags, nullptr, /*allow_exceptions=*/false);
    if (!settings.tags.is_object())
      throw InputError(describe("MLFLOW_TAGS", quote_excerpt(tags), "must be a JSON object of tags ({\"team\": \"qa\"})"));
  }
  settings.http.base_url = settings.tracking_uri;
  settings.http.bearer_token = environment("MLFLOW_TRACKING_TOKEN");
  settings.http.username = environment("MLFLOW_TRACKING_USERNAME");
  settings.http.password = environment("MLFLOW_TRACKING_PASSWORD");
  settings.http.verify_tls = !environment_true("MLFLOW_TRACKING_INSECURE_TLS");
  settings.http.ca_file = environment("MLFLOW_TRACKING_SERVER_CERT_PATH");
  settings.http.client_cert = environment("MLFLOW_TRACKING_CLIENT_CERT_PATH");
  return settings;
}

void check_mlflow_server(const MlflowSettings& settings) {
  MlflowApi api(settings);
  try {
    api.post("/experiments/search", {{"max_results", 1}});
  } catch (const ApiError& error) {
    refuse(api, "a search of its experiments", error);
  }
}

std::unique_ptr<Tracker> connect_mlflow(const MlflowSettings& settings, const RunDescription& run) {
  MlflowApi api(settings);
  std::vector<std::pair<std::string, std::string>> tags;
  for (const auto& [key, value] : settings.tags.items()) tags.emplace_back(key, param_value(value));
  // The run this job continues: MLFLOW_RUN_ID's, else the earlier job's at this server (a resume).
  std::string continued, named_by = "MLFLOW_RUN_ID";
  if (!settings.run_id.empty() && !settings.nested) {
    continued = settings.run_id;
  } else if (run.earlier.contains("mlflow") && run.earlier["mlflow"].value("tracking_uri", "") == settings.shown_uri()) {
    continued = run.earlier["mlflow"].value("run_id", "");
    named_by = "the run the resumed job reported to, in report.json";
  }
  if (!continued.empty()) {
    const nlohmann::json existing = get_run(api, continued, named_by);
    try {
      api.post("/runs/update", {{"run_id", continued}, {"status", "RUNNING"}});
    } catch (const ApiError& error) {
      refuse(api, "continuing the run " + continued, error);
    }
    const nlohmann::json earlier_params = existing["data"].value("params", nlohmann::json::array());
    log_params_and_tags(api, continued, params_to_send(run.params, earlier_params), tags);
    spdlog::info("mlflow: continuing run {} (experiment {}) at {}", continued,
                 existing["info"]["experiment_id"].get<std::string>(), settings.shown_uri());
    return std::make_unique<MlflowTracker>(settings, existing["info"]["experiment_id"].get<std::string>(), continued);
  }
  std::string experiment = experiment_id(api, settings);
  for (const auto& [key, value] : run.tags.items()) tags.insert(tags.begin(), {key, param_value(value)});
  tags.emplace_back("mlflow.runName", run.run_name);
  tags.emplace_back("mlflow.source.name", "mpibert train");
  tags.emplace_back("mlflow.source.type", "LOCAL");
  if (const std::string user = environment("USER"); !user.empty()) tags.emplace_back("mlflow.user", user);
  if (run.tags.contains("git_commit")) tags.emplace_back("mlflow.source.git.commit", param_value(run.tags["git_commit"]));
  if (settings.nested) {
    experiment = get_run(api, settings.run_id, "MLFLOW_RUN_ID, the parent of MLFLOW_NESTED_RUN")["info"]["experiment_id"];
    tags.emplace_back("mlflow.parentRunId", settings.run_id);
  }
  std::string run_id;
  try {
    run_id =
        api.post("/runs/create",
                 {{"experiment_id", experiment}, {"run_name", run.run_name}, {"start_time", now_ms()}})["run"]["info"]["run_id"];
  } catch (const ApiError& error) {
    refuse(api, "a new run in experiment " + experiment, error);
  }
  log_params_and_tags(api, run_id, params_to_send(run.params, nlohmann::json::array()), tags);
  spdlog::info("mlflow: run {} (experiment {}) at {}", run_id, experiment, settings.shown_uri());
  return std::make_unique<MlflowTracker>(settings, experiment, run_id);
}

nlohmann::json mlflow_metrics(const nlohmann::ordered_json& line, int64_t step, int64_t timestamp_ms) {
  nlohmann::json metrics = nlohmann::json::array();
  for (const auto& [key, value] : line.items()) {
    if (key == "step" || !(value.is_number() || value.is_boolean())) continue;
    const double number = value.is_boolean() ? (value.get<bool>() ? 1.0 : 0.0) : value.get<double>();
    nlohmann::json shown = number;
    if (std::isnan(number)) shown = "NaN";
    if (std::isinf(number)) shown = number > 0 ? "Infinity" : "-Infinity";
    metrics.push_back({{"key", key}, {"value", shown}, {"timestamp", timestamp_ms}, {"step", step}});
  }
  return metrics;
}

}  // namespace mpibert
