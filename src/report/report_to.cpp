#include "mpibert/report/report_to.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <sstream>

#include "mpibert/core/error.hpp"

namespace mpibert {

bool environment_true(const char* variable) {
  const char* value = std::getenv(variable);
  std::string upper = value ? value : "";
  std::transform(upper.begin(), upper.end(), upper.begin(), [](unsigned char c) { return std::toupper(c); });
  return upper == "1" || upper == "TRUE" || upper == "YES" || upper == "ON";
}

const std::vector<std::string>& tracker_names() {
  static const std::vector<std::string> names = {"tensorboard", "mlflow", "wandb"};
  return names;
}

ReportTo parse_report_to(const std::vector<std::string>& given, const std::string& flag) {
  std::vector<std::string> names;
  std::string shown;
  for (const std::string& word : given) {
    std::istringstream parts(word);
    for (std::string name; std::getline(parts, name, ',');) {
      names.push_back(name);
      shown += (shown.empty() ? "" : ",") + name;
    }
  }
  if (names.empty())
    throw InputError(describe(flag, "", "give tensorboard, mlflow, wandb (a list: tensorboard,mlflow), all or none"));
  ReportTo to;
  for (const std::string& name : names) {
    if ((name == "none" || name == "all") && names.size() > 1)
      throw InputError(describe(flag, shown,
                                name + " stands alone: give it by itself, or list the trackers (" + "tensorboard,mlflow,wandb)"));
    if (name == "none") continue;
    if (name == "all") {
      to.all = to.tensorboard = true;
      continue;
    }
    const auto& known = tracker_names();
    if (std::find(known.begin(), known.end(), name) == known.end())
      throw InputError(describe(flag, name.empty() ? shown : name,
                                "not a tracker mpibert reports to (tensorboard, mlflow, wandb; or all, or none)"));
    (name == "tensorboard" ? to.tensorboard : name == "mlflow" ? to.mlflow : to.wandb) = true;
  }
  return to;
}

}  // namespace mpibert
