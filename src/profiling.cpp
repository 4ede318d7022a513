#include "mpibert/profiling.hpp"

#include <spdlog/spdlog.h>
#include <torch/csrc/autograd/profiler_kineto.h>

#include <nlohmann/json.hpp>

#include <filesystem>

#include "mpibert/io.hpp"

namespace mpibert {
namespace {

namespace profiler = torch::autograd::profiler;
using torch::profiler::impl::ActivityType;
using torch::profiler::impl::ProfilerConfig;
using torch::profiler::impl::ProfilerState;

std::set<ActivityType> activities(bool cuda) {
  std::set<ActivityType> set{ActivityType::CPU};
  if (cuda) set.insert(ActivityType::CUDA);
  return set;
}

ProfilerConfig config() { return ProfilerConfig(ProfilerState::KINETO, /*report_input_shapes=*/true); }

// Chrome trace event format: complete ("X") events with microsecond start and duration.
std::string chrome_trace(const std::vector<profiler::KinetoEvent>& events) {
  nlohmann::json trace_events = nlohmann::json::array();
  for (const auto& event : events)
    trace_events.push_back({{"name", event.name()},
                            {"ph", "X"},
                            {"cat", "cpu_op"},
                            {"ts", event.startUs()},
                            {"dur", event.durationUs()},
                            {"pid", 0},
                            {"tid", event.startThreadId()}});
  return nlohmann::json{{"traceEvents", trace_events}, {"displayTimeUnit", "ms"}}.dump() + "\n";
}

}  // namespace

StepProfiler::StepProfiler(std::string trace_path, ProfileSchedule schedule, bool cuda)
    : trace_path_(std::move(trace_path)), schedule_(schedule), cuda_(cuda) {}

StepProfiler::~StepProfiler() {
  try {
    finish();
  } catch (const std::exception& e) {
    spdlog::warn("profiler: {}", e.what());
  }
}

void StepProfiler::before_step(int64_t step) {
  if (trace_path_.empty() || done_) return;
  if (step == schedule_.wait) profiler::prepareProfiler(config(), activities(cuda_));  // warmup starts
  if (step == schedule_.wait + schedule_.warmup) {
    profiler::enableProfiler(config(), activities(cuda_));
    recording_ = true;
  }
}

void StepProfiler::after_step(int64_t step) {
  if (recording_ && step + 1 == schedule_.wait + schedule_.warmup + schedule_.active) finish();
}

void StepProfiler::finish() {
  if (!recording_) return;
  recording_ = false;
  done_ = true;
  auto result = profiler::disableProfiler();
  std::filesystem::create_directories(std::filesystem::path(trace_path_).parent_path());
  try {
    result->save(trace_path_);  // Kineto's own trace, GPU activity included
  } catch (const c10::Error&) {
    // LibTorch built without Kineto (Debian's): the CPU events are there all the same.
    write_file_atomic(trace_path_, chrome_trace(result->events()));
  }
  spdlog::info("profile: Chrome trace of {} step(s) in {} (open it in Perfetto)", schedule_.active, trace_path_);
}

}  // namespace mpibert
