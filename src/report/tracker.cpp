#include "mpibert/report/tracker.hpp"

namespace mpibert {

const char* run_end_name(RunEnd end) {
  switch (end) {
    case RunEnd::kCompleted: return "completed";
    case RunEnd::kStopped: return "stopped";
    case RunEnd::kFailed: return "failed";
  }
  return "?";
}

void Trackers::start() {
  for (auto& tracker : trackers_) tracker->start();
}

void Trackers::log(const MetricRecord& record) {
  for (auto& tracker : trackers_) tracker->log(record);
}

void Trackers::flush() {
  for (auto& tracker : trackers_) tracker->flush();
}

std::vector<std::string> Trackers::finish(const nlohmann::ordered_json& results, RunEnd end) {
  std::vector<std::string> unsent;
  if (finished_) return unsent;
  finished_ = true;
  for (auto& tracker : trackers_) {
    std::string note = tracker->finish(results, end);
    if (!note.empty()) unsent.push_back(std::move(note));
  }
  return unsent;
}

nlohmann::ordered_json Trackers::records() const {
  nlohmann::ordered_json records = nlohmann::ordered_json::object();
  for (const auto& tracker : trackers_) {
    nlohmann::ordered_json record = tracker->record();
    if (!record.empty()) records[tracker->name()] = std::move(record);
  }
  return records;
}

}  // namespace mpibert
