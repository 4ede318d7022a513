// Stopping a run together: SIGTERM/SIGUSR1 ask for a checkpoint and a clean exit, and the faults
// the failure tests inject at a given rank and step.
#pragma once

#include <cstdint>
#include <memory>

#include "mpibert/dist/host_collectives.hpp"

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

// Fault injection for the failure tests, each RANK:STEP, acting when that rank starts that step:
// MPIBERT_INJECT_FAILURE throws, MPIBERT_INJECT_HANG stops responding, MPIBERT_INJECT_SIGNAL
// raises SIGUSR1 (as SLURM's warning would, on one rank only).
void inject_faults(const Ranks& ranks, int64_t step);

}  // namespace mpibert
