// The main of the suites that run under mpiexec: every rank runs every test (so collectives
// stay in step), rank 0 prints the usual progress, other ranks print their failures with their
// rank, and the exit status is non-zero on every rank if a test failed on any.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <string>

#include "mpibert/core/logging.hpp"
#include "mpibert/runtime/host_collectives.hpp"

namespace mpibert {
namespace {

// On ranks other than 0, which do not print the usual progress: each failed check, with its rank,
// so that a failure seen by one rank only is not silent.
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  // (UnitTest::current_test_info() would deadlock here: gtest holds its mutex while reporting.)
  void OnTestStart(const ::testing::TestInfo& test) override { test_ = std::string(test.test_suite_name()) + "." + test.name(); }
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s: %s:%d: Failure\n%s\n", rank_, test_.c_str(),
                 result.file_name() ? result.file_name() : "?", result.line_number(), result.message());
    std::fflush(stderr);
  }

 private:
  int rank_;
  std::string test_;
};

}  // namespace
}  // namespace mpibert

int main(int argc, char** argv) {
  mpibert::MpiSession mpi(&argc, &argv);
  mpibert::init_logging(mpi.rank(), mpi.size(), "warn");
  ::testing::InitGoogleTest(&argc, argv);
  if (mpi.rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new mpibert::RankFailurePrinter(mpi.rank()));
  }
  int failed = RUN_ALL_TESTS() != 0;
  int any_failed = 0;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (mpi.rank() == 0 && any_failed && !failed)
    std::fprintf(stderr, "A test failed on another rank: see the [rank N] lines above.\n");
  return any_failed;
}
