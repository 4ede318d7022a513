#include "mpibert/train/stop_signals.hpp"

#include <spdlog/spdlog.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
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
};

Fault fault_from_environment(const char* variable) {
  Fault fault;
  if (const char* value = std::getenv(variable)) {
    if (std::sscanf(value, "%d:%lld", &fault.rank, reinterpret_cast<long long*>(&fault.step)) != 2)
      throw InputError(describe(variable, value, "expected RANK:STEP"));
  }
  return fault;
}

}  // namespace

struct StopSignals::Previous {
  struct sigaction term {}, usr1 {};
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

void inject_faults(const Ranks& ranks, int64_t step) {
  static const Fault failure = fault_from_environment("MPIBERT_INJECT_FAILURE");
  static const Fault hang = fault_from_environment("MPIBERT_INJECT_HANG");
  static const Fault signal = fault_from_environment("MPIBERT_INJECT_SIGNAL");
  if (signal.rank == ranks.rank && signal.step == step) std::raise(SIGUSR1);
  if (failure.rank == ranks.rank && failure.step == step)
    throw std::runtime_error("injected failure at step " + std::to_string(step) + " (MPIBERT_INJECT_FAILURE)");
  if (hang.rank == ranks.rank && hang.step == step) {
    spdlog::warn("injected hang at step {} (MPIBERT_INJECT_HANG)", step);
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
}

}  // namespace mpibert
