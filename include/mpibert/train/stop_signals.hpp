// How the ranks of a run act together outside the collectives of a step: agreeing on the outcome
// of setup, stopping together on SIGTERM/SIGUSR1, and the faults the failure tests inject.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>

#include "mpibert/comm.hpp"
#include "mpibert/error.hpp"

namespace mpibert {

using Clock = std::chrono::steady_clock;
inline double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// "HH:MM:SS"
std::string format_duration(double seconds);

// This process's place in the job.
struct Ranks {
  int rank = 0, size = 1;
  static Ranks of_world() { return {world_rank(), world_size()}; }
  bool root() const { return rank == 0; }
};

// Runs `setup` (work each rank does alone, such as reading files) and agrees on its outcome: if any
// rank failed, the lowest failing rank rethrows its error and the others leave quietly, so one
// message is printed and no rank is left waiting in a collective.
template <typename Setup>
void agree_on(const Ranks& ranks, Setup&& setup) {
  if (ranks.size == 1) return setup();
  std::exception_ptr error;
  try {
    setup();
  } catch (const std::exception&) {
    error = std::current_exception();
  }
  const int failing = lowest_failing_rank(!error);
  if (failing == ranks.rank) std::rethrow_exception(error);
  if (failing >= 0) throw PeerFailure("rank " + std::to_string(failing) + " failed during setup");
}

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
