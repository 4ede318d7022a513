// Stopping a run together: SIGTERM/SIGUSR1 ask for a checkpoint and a clean exit, and the faults
// the failure tests inject at a given rank and step.
#pragma once

#include <cstdint>
#include <memory>

#include "mpibert/runtime/host_collectives.hpp"

namespace mpibert {

// SIGTERM and SIGUSR1 (SLURM's warning before preemption or the time limit) ask for a checkpoint
// and a clean exit after the current step; installed for the object's lifetime.
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  int received() const;  // the signal, 0 if none

 private:
  struct Previous;
  std::unique_ptr<Previous> previous_;
};

// Where in a step a fault is injected: as the step starts, once its backward has queued every
// gradient bucket (a failure there leaves collectives in flight, as an out-of-memory would), or
// while its checkpoint replaces one of the same step (between moving the old one aside and
// renaming the new one in: rank 0 does both).
enum class FaultPoint { kStepStart, kAfterBackward, kReplacingCheckpoint };

// Fault injection for the failure tests, each RANK:STEP (at the step's start), RANK:STEP:backward
// or RANK:STEP:replacing-checkpoint: MPIBERT_INJECT_FAILURE throws, MPIBERT_INJECT_HANG stops
// responding, MPIBERT_INJECT_SIGNAL raises SIGUSR1 (as SLURM's warning would, on one rank only),
// MPIBERT_INJECT_KILL raises SIGKILL (as a node's loss would).
void inject_faults(const Ranks& ranks, int64_t step, FaultPoint point);

// MPIBERT_INJECT_OVERFLOW=RANK:STEP: whether this rank's gradients at this step are to be made
// non-finite (for the fp16 loss-scaling tests: every rank must skip the step with it).
bool overflow_injected(const Ranks& ranks, int64_t step);

}  // namespace mpibert
