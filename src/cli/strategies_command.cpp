// `mpibert strategies [--json]`: the table of strategies (parallel/strategies.hpp) as users and
// scripts read it; the job scripts take their list of strategies from the JSON.
#include <nlohmann/json.hpp>

#include <ostream>

#include "mpibert/cli/commands.hpp"
#include "mpibert/parallel/strategies.hpp"
#include "mpibert/train/train_options.hpp"

namespace mpibert {
namespace {

// The command-line spelling of each option a row reads ("param_dtype" -> "--param-dtype").
std::vector<std::string> flags_of(const std::vector<std::string>& names) {
  std::vector<std::string> flags;
  for (const std::string& name : names)
    for_each_train_option(kDefaultTrainOptions, [&](const TrainOptionField& field, const auto&) {
      if (field.name == name) flags.push_back(field.flag());
    });
  return flags;
}

}  // namespace

int strategies_command(bool json, std::ostream& out) {
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const StrategyRow& row : strategy_table())
    rows.push_back({{"name", row.name},
                    {"default", &row == &strategy_table().front()},
                    {"known_as", row.known_as},
                    {"description", row.description},
                    {"parameters", row.parameters},
                    {"gradients", row.gradients},
                    {"optimizer_state", row.optimizer_state},
                    {"pick_it_when", row.pick_it_when},
                    {"reads", flags_of(row.reads)}});
  if (json) {
    out << rows.dump(2) << "\n";
    return 0;
  }
  for (const auto& row : rows) {
    out << row["name"].get<std::string>() << (row["default"].get<bool>() ? " (default)" : "");
    if (!row["known_as"].get<std::string>().empty()) out << " (" << row["known_as"].get<std::string>() << ")";
    out << ": " << row["description"].get<std::string>() << "\n";
    out << "  a rank holds: parameters " << row["parameters"].get<std::string>() << "; gradients "
        << row["gradients"].get<std::string>() << "; AdamW state " << row["optimizer_state"].get<std::string>() << "\n";
    out << "  pick it when: " << row["pick_it_when"].get<std::string>() << "\n";
    std::string reads;
    for (const auto& flag : row["reads"]) reads += (reads.empty() ? "" : ", ") + flag.get<std::string>();
    out << "  strategy options it reads: " << (reads.empty() ? "none" : reads) << "\n";
  }
  return 0;
}

}  // namespace mpibert
