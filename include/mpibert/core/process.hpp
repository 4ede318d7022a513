// Process-wide settings for tensor workloads, and facts about the process's machine.
#pragma once

#include <cstdint>
#include <string>

namespace mpibert {

// This machine's host name (gethostname), or "localhost" if it has none: what logs, run records,
// event file names and peer probes call it.
std::string host_name();

// Keeps freed tensor memory in the heap instead of handing every large block back to the kernel.
// glibc serves big allocations with mmap and munmaps them on free, so each training step would
// page-fault its activations in anew (a noticeable part of a small model's step on the CPU:
// docs/measurements.md).
// Results are unchanged; the resident set stays at its peak.
void keep_freed_memory_for_reuse();

// The most memory this process has had resident since it started (getrusage's ru_maxrss), in bytes.
int64_t peak_resident_bytes();

}  // namespace mpibert
