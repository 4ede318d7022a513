// Elapsed time: the one monotonic clock that timings, timeouts and progress lines use.
#pragma once

#include <chrono>
#include <string>

namespace mpibert {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// "HH:MM:SS"
std::string format_duration(double seconds);

}  // namespace mpibert
