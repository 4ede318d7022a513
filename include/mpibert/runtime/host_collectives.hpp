// MPI: process setup and the few host-side collectives used for coordination (status agreement,
// counts, metrics). Gradient traffic goes through the communicator (communicator.hpp).
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace mpibert {

// Owns MPI_Init_thread/MPI_Finalize for a process. Asks for MPI_THREAD_MULTIPLE: the MPI
// communicator's worker thread runs collectives while the main thread may call MPI too.
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

// The rank and size of MPI_COMM_WORLD, or 0 and 1 when MPI is not initialized.
int world_rank();
int world_size();

// This process's rank among the ranks of its node (the GPU it uses): from MPI's shared-memory
// split, made once by MpiSession while every rank starts; without a session,
// OMPI_COMM_WORLD_LOCAL_RANK or SLURM_LOCALID, else 0.
int local_rank();

// This process's place in the job.
struct Ranks {
  int rank = 0, size = 1;
  static Ranks of_world() { return {world_rank(), world_size()}; }
  bool root() const { return rank == 0; }
};

// An error another rank reported (and logged); this rank only leaves with a non-zero status.
class PeerFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// An error this rank has logged already (with its rank), while its communicator still stood: it
// only has to end the job.
class ReportedFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// How long a host-side or tensor collective may wait before the job is ended (seconds, <= 0:
// forever). Set once from --collective-timeout.
void set_collective_timeout(double seconds);
double collective_timeout();

// Logs "collective timed out after N s on rank R while waiting for WHAT" and ends the job.
[[noreturn]] void report_collective_timeout(const std::string& what, double waited_seconds, double timeout_seconds);

// What a timeout report can add once the ranks know each other (peers.hpp installs it when they
// publish their addresses): this rank's host, and one sentence on which peers still answer.
struct TimeoutWitness {
  std::function<std::string()> own_host;
  std::function<std::string()> probe_peers;
};
void set_timeout_witness(TimeoutWitness witness);

// Sums (or takes the maximum of) `values` over ranks, element by element, within the collective
// timeout; `what` names the operation in a timeout report.
std::vector<double> sum_over_ranks(std::vector<double> values, const std::string& what);
std::vector<double> max_over_ranks(std::vector<double> values, const std::string& what);

// Every rank's string, in rank order, on every rank.
std::vector<std::string> all_gather_strings(const std::string& local);

// Rank 0 receives every rank's values concatenated in rank order; other ranks get nothing.
std::vector<float> gather_to_root(const std::vector<float>& local, const std::string& what);

// Rank `root`'s string, on every rank.
std::string broadcast_string(std::string value, int root, const std::string& what);

void barrier(const std::string& what);

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

}  // namespace mpibert
