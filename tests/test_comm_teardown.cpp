// Run by ctest under `mpiexec -n 1|2|3`, in a process of its own: a rank that leaves the MPI
// communicator by an exception while an operation it queued is waiting for ranks that will never
// join it (they are elsewhere; in a job, the failing rank then ends the job with its message).
// Its destructor must drop that operation and return at once instead of waiting forever. The
// dropped barrier stays pending in MPI, so nothing else runs in this process after it.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <stdexcept>
#include <thread>

#include "mpibert/comm/communicator.hpp"
#include "mpibert/runtime/host_collectives.hpp"

namespace mpibert {
namespace {

using Clock = std::chrono::steady_clock;

TEST(CommTeardown, ALastRankLeavingByAnExceptionDropsTheOperationNoOtherRankJoins) {
  const int rank = world_rank(), size = world_size();
  double seconds_to_leave = 0;
  {
    auto comm = make_mpi_communicator(600);  // a timeout far beyond the test's: only the teardown can end the wait
    if (size > 1 && rank == size - 1) {
      const auto start = Clock::now();
      try {
        std::unique_ptr<Communicator> failing = std::move(comm);
        failing->all_reduce_sum(torch::ones({4}), "an all-reduce no other rank joins");
        std::this_thread::sleep_for(std::chrono::milliseconds(100));  // its worker now waits for the others
        throw std::runtime_error("out of memory in backward, say");
      } catch (const std::runtime_error&) {
      }
      seconds_to_leave = std::chrono::duration<double>(Clock::now() - start).count();
    }
  }
  if (size > 1 && rank == size - 1) {
    EXPECT_LT(seconds_to_leave, 5.0) << "the destructor waited for the other ranks";
  }
  barrier("after the abandoned communicator");
}

}  // namespace
}  // namespace mpibert
