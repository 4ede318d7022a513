#include "mpibert/train/stop_signals.hpp"

#include <spdlog/spdlog.h>

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>

#include "mpibert/core/error.hpp"

namespace mpibert {

namespace {

std::atomic<int> stop_signal{0};
extern "C" void on_stop_signal(int signal) { stop_signal = signal; }

struct Fault {
  int rank = -1;
  int64_t step = -1;
  FaultPoint point = FaultPoint::kStepStart;
};

// RANK:STEP[:backward] from the environment; none (rank -1) when the variable is not set.
Fault fault_from_environment(const char* variable) {
  Fault fault;
  const char* value = std::getenv(variable);
  if (!value) return fault;
  std::istringstream in(value);
  std::string rank, step, point;
  std::getline(in, rank, ':');
  std::getline(in, step, ':');
  std::getline(in, point);
  try {
    size_t rank_end = 0, step_end = 0;
    fault.rank = std::stoi(rank, &rank_end);
    fault.step = std::stoll(step, &step_end);
    if (rank_end != rank.size() || step_end != step.size() ||
        (point != "" && point != "backward" && point != "replacing-checkpoint"))
      throw std::invalid_argument(value);
  } catch (const std::exception&) {
    throw InputError(describe(variable, value, "expected RANK:STEP, RANK:STEP:backward or RANK:STEP:replacing-checkpoint"));
  }
  fault.point = point == "backward"               ? FaultPoint::kAfterBackward
                : point == "replacing-checkpoint" ? FaultPoint::kReplacingCheckpoint
                                                  : FaultPoint::kStepStart;
  return fault;
}

}  // namespace

struct StopSignals::Previous {
  struct sigaction term {
  }, usr1{};
};

StopSignals::StopSignals() : previous_(std::make_unique<Previous>()) {
  stop_signal = 0;
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, &previous_->term);
  sigaction(SIGUSR1, &action, &previous_->usr1);
}

StopSignals::~StopSignals() {
  sigaction(SIGTERM, &previous_->term, nullptr);
  sigaction(SIGUSR1, &previous_->usr1, nullptr);
}

int StopSignals::received() const { return stop_signal; }

bool overflow_injected(const Ranks& ranks, int64_t step) {
  static const Fault overflow = fault_from_environment("MPIBERT_INJECT_OVERFLOW");
  return overflow.rank == ranks.rank && overflow.step == step;
}

void inject_faults(const Ranks& ranks, int64_t step, FaultPoint point) {
  static const Fault failure = fault_from_environment("MPIBERT_INJECT_FAILURE");
  static const Fault hang = fault_from_environment("MPIBERT_INJECT_HANG");
  static const Fault signal = fault_from_environment("MPIBERT_INJECT_SIGNAL");
  static const Fault kill = fault_from_environment("MPIBERT_INJECT_KILL");
  auto here = [&](const Fault& fault) { return fault.rank == ranks.rank && fault.step == step && fault.point == point; };
  if (here(signal)) std::raise(SIGUSR1);
  if (here(kill)) {
    spdlog::default_logger()->flush();
    std::raise(SIGKILL);
  }
  if (here(failure))
    throw std::runtime_error("injected failure at step " + std::to_string(step) +
                             (point == FaultPoint::kAfterBackward ? " after backward" : "") + " (MPIBERT_INJECT_FAILURE)");
  if (here(hang)) {
    spdlog::warn("injected hang at step {} (MPIBERT_INJECT_HANG)", step);
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
}

}  // namespace mpibert
