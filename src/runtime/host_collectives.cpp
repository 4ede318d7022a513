#include "mpibert/runtime/host_collectives.hpp"

#include <mpi.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <utility>

#include "mpibert/core/error.hpp"
#include "mpibert/core/time.hpp"
#include "mpibert/runtime/mpi_own_allocations.hpp"
#include "mpibert/runtime/mpi_wait.hpp"
#include "mpibert/runtime/open_mpi_settings.hpp"

namespace mpibert {
namespace {

TimeoutWitness timeout_witness;  // none until the peers published their addresses

std::atomic<double> collective_timeout_seconds{0.0};
constexpr int kAbortGraceSeconds = 5;
int session_local_rank = -1;  // set by MpiSession

int integer_from_environment(const char* name, int fallback) {
  const char* value = std::getenv(name);
  if (!value || !*value) return fallback;
  char* end = nullptr;
  const long parsed = std::strtol(value, &end, 10);
  if (*end != '\0' || parsed < 0) throw InputError(describe(name, value, "not a local rank"));
  return static_cast<int>(parsed);
}

}  // namespace

// Polls `request` until it completes or the collective timeout passes. Open MPI progresses
// non-blocking collectives only inside MPI calls, so the polling is what moves data: sleeping
// between polls slows a large all-reduce several times over (docs/measurements.md), so it only
// yields.
void wait_for(MPI_Request& request, const std::string& what) {
  const auto start = Clock::now();
  const double timeout = collective_timeout();
  for (int polls = 1;; ++polls) {
    int done = 0;
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (done) return;
    std::this_thread::yield();
    if (timeout > 0 && polls % 1024 == 0) {
      const double waited = seconds_since(start);
      if (waited > timeout) report_collective_timeout(what, waited, timeout);
    }
  }
}

namespace {

std::vector<double> reduce_doubles(std::vector<double> values, MPI_Op op, const std::string& what) {
  std::vector<double> result(values.size());
  MPI_Request request;
  MPI_Iallreduce(values.data(), result.data(), static_cast<int>(values.size()), MPI_DOUBLE, op, MPI_COMM_WORLD, &request);
  wait_for(request, what);
  return result;
}

}  // namespace

MpiSession::MpiSession(int* argc, char*** argv) {
  const OpenMpiOwnAllocations not_ours;
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    apply_open_mpi_defaults();
    int provided = 0;
    MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
    if (provided < MPI_THREAD_MULTIPLE) {
      std::fprintf(stderr, "mpibert: this MPI library does not provide MPI_THREAD_MULTIPLE (got level %d)\n", provided);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  // A collective: made here, while every rank starts, and never again inside per-rank setup.
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &session_local_rank);
  MPI_Comm_free(&node);
}

MpiSession::~MpiSession() {
  int finalized = 0;
  MPI_Finalized(&finalized);
#ifdef MPIBERT_LEAK_SANITIZER
  // The process's leak check, now, while Open MPI's components are loaded: a leak in one of them
  // is named (tests/sanitizers/lsan.supp names each), where at exit it would be <unknown module>.
  __lsan_do_leak_check();
#endif
  if (!finalized) MPI_Finalize();
}

int world_rank() {
  int initialized = 0, rank = 0;
  MPI_Initialized(&initialized);
  if (initialized) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

int world_size() {
  int initialized = 0, size = 1;
  MPI_Initialized(&initialized);
  if (initialized) MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

int local_rank() {
  if (session_local_rank >= 0) return session_local_rank;
  return integer_from_environment("OMPI_COMM_WORLD_LOCAL_RANK", integer_from_environment("SLURM_LOCALID", 0));
}

void set_collective_timeout(double seconds) { collective_timeout_seconds = seconds; }
double collective_timeout() { return collective_timeout_seconds; }

void set_timeout_witness(TimeoutWitness witness) { timeout_witness = std::move(witness); }

void report_collective_timeout(const std::string& what, double waited_seconds, double timeout_seconds) {
  const int rank = world_rank();
  const bool witnessed = static_cast<bool>(timeout_witness.probe_peers);
  const std::string where = witnessed ? " (" + timeout_witness.own_host() + ")" : "";
  spdlog::error(
      "collective timed out after {:.0f} s (--collective-timeout {:g}) on rank {}{} while waiting for {}; "
      "probing the other ranks",
      waited_seconds, timeout_seconds, rank, where, what);
  if (witnessed) spdlog::error("rank {}: {}: ending the job", rank, timeout_witness.probe_peers());
  spdlog::default_logger()->flush();
  abort_job(1);
}

bool all_ranks_ok(bool local_ok) {
  int local = local_ok ? 1 : 0, global = 0;
  MPI_Request request;
  MPI_Iallreduce(&local, &global, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD, &request);
  wait_for(request, "the ranks' agreement that a step of the run succeeded everywhere");
  return global == 1;
}

int lowest_failing_rank(bool local_ok) {
  int rank = 0, candidate = 0, lowest = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  candidate = local_ok ? INT32_MAX : rank;
  MPI_Request request;
  MPI_Iallreduce(&candidate, &lowest, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD, &request);
  wait_for(request, "the ranks' agreement on which rank failed");
  return lowest == INT32_MAX ? -1 : lowest;
}

std::vector<int64_t> gather_to_root(const std::vector<int64_t>& local) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::vector<int64_t> all(rank == 0 ? local.size() * static_cast<size_t>(size) : 0);
  MPI_Request request;
  MPI_Igather(local.data(), static_cast<int>(local.size()), MPI_INT64_T, all.data(), static_cast<int>(local.size()), MPI_INT64_T,
              0, MPI_COMM_WORLD, &request);
  wait_for(request, "a gather of counts to rank 0");
  return all;
}

double max_over_ranks(double local) { return reduce_doubles({local}, MPI_MAX, "the maximum of a value over ranks").front(); }

std::vector<double> sum_over_ranks(std::vector<double> values, const std::string& what) {
  return reduce_doubles(std::move(values), MPI_SUM, what);
}

std::vector<double> max_over_ranks(std::vector<double> values, const std::string& what) {
  return reduce_doubles(std::move(values), MPI_MAX, what);
}

std::vector<std::string> all_gather_strings(const std::string& local) {
  const int size = world_size();
  int length = static_cast<int>(local.size());
  std::vector<int> lengths(static_cast<size_t>(size)), offsets(static_cast<size_t>(size));
  MPI_Request request;
  MPI_Iallgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, MPI_COMM_WORLD, &request);
  wait_for(request, "an all-gather of every rank's text (lengths)");
  int total = 0;
  for (int r = 0; r < size; ++r) {
    offsets[static_cast<size_t>(r)] = total;
    total += lengths[static_cast<size_t>(r)];
  }
  std::string all(static_cast<size_t>(total), '\0');
  MPI_Iallgatherv(local.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR, MPI_COMM_WORLD, &request);
  wait_for(request, "an all-gather of every rank's text");
  std::vector<std::string> result;
  for (int r = 0; r < size; ++r)
    result.push_back(all.substr(static_cast<size_t>(offsets[static_cast<size_t>(r)]),
                                static_cast<size_t>(lengths[static_cast<size_t>(r)])));
  return result;
}

std::vector<float> gather_to_root(const std::vector<float>& local, const std::string& what) {
  const int rank = world_rank(), size = world_size();
  int count = static_cast<int>(local.size());
  std::vector<int> counts(static_cast<size_t>(size)), offsets(static_cast<size_t>(size));
  MPI_Request request;
  MPI_Igather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, MPI_COMM_WORLD, &request);
  wait_for(request, what + " (counts)");
  int total = 0;
  for (int r = 0; r < size; ++r) {
    offsets[static_cast<size_t>(r)] = total;
    total += counts[static_cast<size_t>(r)];
  }
  std::vector<float> all(rank == 0 ? static_cast<size_t>(total) : 0);
  MPI_Igatherv(local.data(), count, MPI_FLOAT, all.data(), counts.data(), offsets.data(), MPI_FLOAT, 0, MPI_COMM_WORLD, &request);
  wait_for(request, what);
  return all;
}

std::string broadcast_string(std::string value, int root, const std::string& what) {
  uint64_t length = value.size();
  MPI_Request request;
  MPI_Ibcast(&length, 1, MPI_UINT64_T, root, MPI_COMM_WORLD, &request);
  wait_for(request, what + " (length)");
  value.resize(length);
  MPI_Ibcast(value.data(), static_cast<int>(length), MPI_CHAR, root, MPI_COMM_WORLD, &request);
  wait_for(request, what);
  return value;
}

void barrier(const std::string& what) {
  MPI_Request request;
  MPI_Ibarrier(MPI_COMM_WORLD, &request);
  wait_for(request, what);
}

void abort_job(int exit_code) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) {
    // MPI_Abort asks the launcher to kill every rank. Cut off from it (a dead link), Open MPI's
    // abort can block until TCP gives up: this rank leaves on its own after a grace period.
    std::thread([exit_code] {
      std::this_thread::sleep_for(std::chrono::seconds(kAbortGraceSeconds));
      std::fprintf(stderr, "mpibert: MPI_Abort did not end this process within %d s; exiting\n", kAbortGraceSeconds);
      std::_Exit(exit_code);
    }).detach();
    MPI_Abort(MPI_COMM_WORLD, exit_code);
  }
  std::exit(exit_code);
}

}  // namespace mpibert
