// --profile: LibTorch's (Kineto) profiler over a window of training steps, scheduled like
// torch.profiler.schedule(wait, warmup, active); writes a Chrome trace that Perfetto opens.
// Our phases appear as named ranges ("mpibert::forward", ...) beside LibTorch's operators.
#pragma once

#include <ATen/record_function.h>

#include <cstdint>
#include <string>

namespace mpibert {

struct ProfileSchedule {
  int64_t wait = 2, warmup = 5, active = 8;
};

class StepProfiler {
 public:
  // An empty trace_path disables profiling.
  StepProfiler(std::string trace_path, ProfileSchedule schedule, bool cuda = false);
  ~StepProfiler();  // saves a window that is still open (a run shorter than the schedule)
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;

  // Call around each training step; `step` counts the steps of this run from 0. Warmup steps
  // initialize the profiler without recording; active steps are recorded.
  void before_step(int64_t step);
  void after_step(int64_t step);

 private:
  void finish();
  std::string trace_path_;
  ProfileSchedule schedule_;
  bool cuda_, recording_ = false, done_ = false;
};

}  // namespace mpibert

// A named range in the trace (a no-op cost when no profiler is on).
#define MPIBERT_PROFILE_RANGE(name) RECORD_USER_SCOPE(name)
