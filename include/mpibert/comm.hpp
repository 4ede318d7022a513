// MPI: process setup and the few host-side collectives used for coordination (status agreement,
// counts, metrics). Gradient traffic lives in the ddp module.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mpibert {

// Owns MPI_Init/MPI_Finalize for a process.
class MpiSession {
 public:
  MpiSession(int* argc, char*** argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }

 private:
  int rank_ = 0, size_ = 1;
};

// True on every rank iff `local_ok` is true on every rank. Ranks that failed take part too, so
// nobody waits in a collective for a rank that gave up.
bool all_ranks_ok(bool local_ok);

// -1 when `local_ok` holds on every rank, else the lowest rank where it does not. Lets the
// lowest failing rank alone report an error that every rank hit the same way.
int lowest_failing_rank(bool local_ok);

// Rank 0 receives every rank's value (in rank order); other ranks get an empty vector.
std::vector<int64_t> gather_to_root(const std::vector<int64_t>& local);

double max_over_ranks(double local);

// Ends the whole job at once: for failures outside the agreed protocol (bugs, crashes).
[[noreturn]] void abort_job(int exit_code);

}  // namespace mpibert
