#include "mpibert/core/process.hpp"

#include <malloc.h>
#include <sys/resource.h>
#include <unistd.h>

namespace mpibert {

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

void keep_freed_memory_for_reuse() {
  mallopt(M_MMAP_THRESHOLD, 1 << 30);  // below 1 GiB, allocate from the heap (reusable)
  mallopt(M_TRIM_THRESHOLD, -1);       // and never trim it back
}

int64_t peak_resident_bytes() {
  struct rusage usage = {};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

}  // namespace mpibert
