// HF's --report_to: the trackers a run reports to, as a list ("tensorboard,mlflow,wandb"), "all"
// or "none".
#pragma once

#include <string>
#include <vector>

namespace mpibert {

struct ReportTo {
  bool tensorboard = false, mlflow = false, wandb = false;
  // "all": TensorBoard, MLflow where MLFLOW_TRACKING_URI is set, W&B where the companion and its
  // wandb package are found (HF's "all": the integrations installed).
  bool all = false;
};

// Whether an environment variable is set to what HF's integrations read as true (1, true, yes, on;
// any case): MLFLOW_NESTED_RUN, WANDB_DISABLED, DISABLE_MLFLOW_INTEGRATION, ...
bool environment_true(const char* variable);

// The trackers mpibert reports to, in the order of --report-to's help.
const std::vector<std::string>& tracker_names();

// `given` as the command line gives it (each word may be a comma-separated list). An unknown name,
// "none" or "all" beside others, or an empty list is refused naming `flag` (InputError).
ReportTo parse_report_to(const std::vector<std::string>& given, const std::string& flag);

}  // namespace mpibert
