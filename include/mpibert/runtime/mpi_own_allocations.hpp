// In sanitizer builds (scripts/sanitize.sh): what Open MPI allocates while it starts, and while it
// builds and frees a communicator, is its own and some of it is never freed, much of it in
// components it unloads at MPI_Finalize, where no suppression could name them. Scopes of this type
// leave those allocations out of LeakSanitizer's check (ours stay in it); MpiSession runs the check
// itself before MPI_Finalize.
#pragma once

#if defined(__SANITIZE_ADDRESS__)
#define MPIBERT_LEAK_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MPIBERT_LEAK_SANITIZER 1
#endif
#endif
#ifdef MPIBERT_LEAK_SANITIZER
#include <sanitizer/lsan_interface.h>
#endif

namespace mpibert {

struct OpenMpiOwnAllocations {
#ifdef MPIBERT_LEAK_SANITIZER
  OpenMpiOwnAllocations() { __lsan_disable(); }
  ~OpenMpiOwnAllocations() { __lsan_enable(); }
#endif
};

}  // namespace mpibert
