#include "mpibert/train/profiling.hpp"

#include <spdlog/spdlog.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/cuda.h>

#include <filesystem>

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
  // The steps only queue GPU work: the last steps' kernels are recorded once they ran.
  if (cuda_) torch::cuda::synchronize();
  auto result = profiler::disableProfiler();
  std::filesystem::create_directories(std::filesystem::path(trace_path_).parent_path());
  result->save(trace_path_);  // Kineto's Chrome trace: CPU operators, our ranges, CUDA kernels and copies
  spdlog::info("profile: Chrome trace of {} step(s) in {} (open it in Perfetto)", schedule_.active, trace_path_);
}

}  // namespace mpibert
