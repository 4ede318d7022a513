#include "mpibert/core/time.hpp"

#include <cstdint>
#include <cstdio>

namespace mpibert {

std::string format_duration(double seconds) {
  const auto total = static_cast<int64_t>(seconds);
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%02lld:%02lld:%02lld", static_cast<long long>(total / 3600),
                static_cast<long long>(total / 60 % 60), static_cast<long long>(total % 60));
  return buffer;
}

}  // namespace mpibert
