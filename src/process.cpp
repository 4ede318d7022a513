#include "mpibert/process.hpp"

#include <malloc.h>

namespace mpibert {

void keep_freed_memory_for_reuse() {
  mallopt(M_MMAP_THRESHOLD, 1 << 30);  // below 1 GiB, allocate from the heap (reusable)
  mallopt(M_TRIM_THRESHOLD, -1);       // and never trim it back
}

}  // namespace mpibert
