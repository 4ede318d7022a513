#include "mpibert/comm.hpp"

#include <mpi.h>

#include <cstdint>
#include <cstdlib>

namespace mpibert {

MpiSession::MpiSession(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) MPI_Init(argc, argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
}

MpiSession::~MpiSession() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

bool all_ranks_ok(bool local_ok) {
  int local = local_ok ? 1 : 0, global = 0;
  MPI_Allreduce(&local, &global, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return global == 1;
}

int lowest_failing_rank(bool local_ok) {
  int rank = 0, candidate = 0, lowest = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  candidate = local_ok ? INT32_MAX : rank;
  MPI_Allreduce(&candidate, &lowest, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return lowest == INT32_MAX ? -1 : lowest;
}

std::vector<int64_t> gather_to_root(const std::vector<int64_t>& local) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::vector<int64_t> all(rank == 0 ? local.size() * static_cast<size_t>(size) : 0);
  MPI_Gather(local.data(), static_cast<int>(local.size()), MPI_INT64_T, all.data(), static_cast<int>(local.size()),
             MPI_INT64_T, 0, MPI_COMM_WORLD);
  return all;
}

double max_over_ranks(double local) {
  double global = 0;
  MPI_Allreduce(&local, &global, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return global;
}

void abort_job(int exit_code) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::exit(exit_code);
}

}  // namespace mpibert
