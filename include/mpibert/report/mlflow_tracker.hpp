// MLflow through its REST API (api/2.0/mlflow: experiments, runs/create, runs/log-batch,
// runs/update), configured by the environment variables HF's MLflowCallback reads. The run's
// parameters and tags go at the start; each metrics line becomes one metric per value at its step,
// queued (send_queue.hpp) and sent in batches by a thread of its own; the end sends the final
// results and sets the run's status, within a bound (end_time, failed_end_time) that a server
// which hangs cannot stretch.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "mpibert/report/http_client.hpp"
#include "mpibert/report/tracker.hpp"

namespace mpibert {

struct MlflowSettings {
  std::string tracking_uri;     // MLFLOW_TRACKING_URI: the server, http:// or https://
  std::string experiment_name;  // MLFLOW_EXPERIMENT_NAME: made when missing ("": MLFLOW_EXPERIMENT_ID, else Default)
  std::string experiment_id;    // MLFLOW_EXPERIMENT_ID (MLflow's own variable)
  std::string run_id;           // MLFLOW_RUN_ID: the run to continue; with nested, the parent of a new one
  bool nested = false;          // MLFLOW_NESTED_RUN
  nlohmann::ordered_json tags = nlohmann::ordered_json::object();  // MLFLOW_TAGS, a JSON object
  HttpSettings http;  // the URI, MLFLOW_TRACKING_TOKEN / _USERNAME / _PASSWORD, _INSECURE_TLS, _SERVER_CERT_PATH
  // The end's bound, the run's status included: a completed or stopped run's, a failed job's
  // (its failure must reach the other ranks promptly). Its last quarter is the status's.
  std::chrono::milliseconds end_time{30000}, failed_end_time{2000};

  // From the environment; a variable that is missing or cannot be used is refused by name (InputError).
  static MlflowSettings from_environment();
  // The URI as messages and records show it (without credentials).
  std::string shown_uri() const { return url_without_credentials(tracking_uri); }
};

// The server answers at the URI, checked before anything is written; InputError naming the URI and
// the variable otherwise.
void check_mlflow_server(const MlflowSettings& settings);

// The run continued (MLFLOW_RUN_ID, or on a resume the earlier job's run at the same server) or
// made (in MLFLOW_EXPERIMENT_NAME, nested under MLFLOW_RUN_ID with MLFLOW_NESTED_RUN), with its
// parameters and tags logged: InputError naming the URI when the server refuses.
std::unique_ptr<Tracker> connect_mlflow(const MlflowSettings& settings, const RunDescription& run);

// A metrics line as MLflow's log-batch metrics: one per number (booleans as 0/1) but the step, at
// the line's step; NaN and infinities as MLflow's JSON spells them.
nlohmann::json mlflow_metrics(const nlohmann::ordered_json& line, int64_t step, int64_t timestamp_ms);

}  // namespace mpibert
