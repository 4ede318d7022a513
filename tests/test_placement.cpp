// The GPU path's decisions, taken on inputs rather than on the machine, so that they are tested
// where no GPU is: which backend the ranks' devices allow, the refusal of ranks on different kinds
// of device, how a communicator ends when an exception unwinds, and the NVIDIA driver's version
// from /proc/driver/nvidia/version.
#include <gtest/gtest.h>

#include <functional>
#include <stdexcept>

#include "mpibert/comm/communicator.hpp"
#include "mpibert/core/error.hpp"
#include "mpibert/runtime/device.hpp"
#include "mpibert/runtime/placement.hpp"
#include "test_support.hpp"

namespace mpibert {
namespace {

RankPlacement cuda(int rank, const std::string& host, int index) { return {rank, host, "cuda", index}; }
RankPlacement cpu(int rank, const std::string& host) { return {rank, host, "cpu", -1}; }

TEST(Backend, AutoTakesNcclWhereEveryRankHasAGpuOfItsOwn) {
  const std::vector<RankPlacement> two_nodes = {cuda(0, "n1", 0), cuda(1, "n1", 1), cuda(2, "n2", 0), cuda(3, "n2", 1)};
  const BackendChoice auto_choice = choose_backend(CommChoice::kAuto, two_nodes, true);
  EXPECT_EQ(auto_choice.backend, "nccl");
  EXPECT_EQ(auto_choice.warning, "");
  EXPECT_EQ(choose_backend(CommChoice::kNccl, two_nodes, true).backend, "nccl");
  EXPECT_EQ(choose_backend(CommChoice::kMpi, two_nodes, true).backend, "mpi");
  EXPECT_EQ(choose_backend(CommChoice::kAuto, {cpu(0, "n1"), cpu(1, "n2")}, true).backend, "mpi");
  EXPECT_EQ(choose_backend(CommChoice::kAuto, {cpu(0, "n1"), cpu(1, "n2")}, true).warning, "");
}

TEST(Backend, RanksSharingAGpuFallBackToMpiUnderAutoAndAreRefusedUnderNccl) {
  // cuda:0 on n1 twice (ranks 0 and 2); cuda:0 on n2 is another GPU.
  const std::vector<RankPlacement> shared = {cuda(0, "n1", 0), cuda(1, "n2", 0), cuda(2, "n1", 0)};
  const BackendChoice choice = choose_backend(CommChoice::kAuto, shared, true);
  EXPECT_EQ(choice.backend, "mpi");
  EXPECT_NE(choice.warning.find("ranks 0 and 2 share cuda:0 on n1"), std::string::npos) << choice.warning;
  const std::string refusal = test::error_of([&] { choose_backend(CommChoice::kNccl, shared, true); });
  EXPECT_NE(refusal.find("--comm"), std::string::npos) << refusal;
  EXPECT_NE(refusal.find("ranks 0 and 2 share cuda:0 on n1"), std::string::npos) << refusal;
  EXPECT_NE(refusal.find("--comm mpi"), std::string::npos) << refusal;
}

TEST(Backend, SharedGpusGoToNcclOnlyInItsTestModeWhichTheWarningNames) {
  const std::vector<RankPlacement> shared = {cuda(0, "n1", 0), cuda(1, "n1", 0)};
  for (CommChoice comm : {CommChoice::kAuto, CommChoice::kNccl}) {
    const BackendChoice choice = choose_backend(comm, shared, true, /*shared_gpu_test_mode=*/true);
    EXPECT_EQ(choice.backend, "nccl");
    EXPECT_NE(choice.warning.find("MPIBERT_NCCL_SHARED_GPU"), std::string::npos) << choice.warning;
    EXPECT_NE(choice.warning.find("ranks 0 and 1 share cuda:0 on n1"), std::string::npos) << choice.warning;
    EXPECT_TRUE(choice.nccl_host_per_rank);
  }
  // Ranks on GPUs of their own keep NCCL's transports within a host (no host per rank).
  EXPECT_FALSE(choose_backend(CommChoice::kNccl, {cuda(0, "n1", 0), cuda(1, "n1", 1)}, true, true).nccl_host_per_rank);
  // The mode changes nothing where no GPU is shared, nor without NCCL, nor on CPUs.
  EXPECT_EQ(choose_backend(CommChoice::kNccl, {cuda(0, "n1", 0), cuda(1, "n1", 1)}, true, true).warning, "");
  EXPECT_EQ(choose_backend(CommChoice::kAuto, shared, false, true).backend, "mpi");
  EXPECT_EQ(choose_backend(CommChoice::kAuto, {cpu(0, "n1"), cpu(1, "n1")}, true, true).backend, "mpi");
  EXPECT_EQ(choose_backend(CommChoice::kMpi, shared, true, true).backend, "mpi");
}

TEST(Backend, NcclNeedsGpusAndABuildWithNccl) {
  const std::string on_cpus = test::error_of([] { choose_backend(CommChoice::kNccl, {cpu(0, "n1"), cpu(1, "n1")}, true); });
  EXPECT_NE(on_cpus.find("NCCL reduces CUDA tensors"), std::string::npos) << on_cpus;
  const std::string unbuilt = test::error_of([] {
    choose_backend(CommChoice::kNccl, {cuda(0, "n1", 0), cuda(1, "n1", 1)}, false);
  });
  EXPECT_NE(unbuilt.find("built without NCCL"), std::string::npos) << unbuilt;
  const BackendChoice without = choose_backend(CommChoice::kAuto, {cuda(0, "n1", 0), cuda(1, "n1", 1)}, false);
  EXPECT_EQ(without.backend, "mpi");
  EXPECT_NE(without.warning.find("without NCCL"), std::string::npos);
}

TEST(RankPlacement, RanksOnDifferentKindsOfDeviceAreRefusedByName) {
  EXPECT_NO_THROW(require_one_device_type({cuda(0, "n1", 0), cuda(1, "n2", 0)}, DeviceChoice::kAuto));
  EXPECT_NO_THROW(require_one_device_type({cpu(0, "n1"), cpu(1, "n2")}, DeviceChoice::kAuto));
  // A rank whose --device auto found no GPU (a driver too old for the CUDA runtime, say).
  const std::string refusal = test::error_of([] {
    require_one_device_type({cuda(0, "n1", 0), cuda(1, "n1", 1), cpu(2, "n2")}, DeviceChoice::kAuto);
  });
  EXPECT_NE(refusal.find("--device"), std::string::npos) << refusal;
  EXPECT_NE(refusal.find("cuda:0 on n1 (rank 0), cuda:1 on n1 (rank 1), cpu on n2 (rank 2)"), std::string::npos) << refusal;
  EXPECT_NE(refusal.find("--device cuda"), std::string::npos) << refusal;
}

TEST(RankPlacement, Describes) {
  EXPECT_EQ(cuda(3, "gpu07", 2).describe(), "cuda:2 on gpu07");
  EXPECT_EQ(cpu(0, "login1").describe(), "cpu on login1");
  EXPECT_EQ(RankPlacement::of(1, "h", torch::Device(torch::kCPU)).describe(), "cpu on h");
}

// A communicator that records how its destructor would end it.
class RecordingCommunicator : public Communicator {
 public:
  explicit RecordingCommunicator(Teardown* ended) : ended_(ended) {}
  ~RecordingCommunicator() override { *ended_ = teardown(); }
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend() const override { return "recording"; }
  CommunicatorCapabilities capabilities() const override { return {}; }
  std::unique_ptr<Communicator> split(int, int, const std::string&) override { return nullptr; }
  std::shared_ptr<Work> all_reduce_sum(torch::Tensor, const std::string&) override { return nullptr; }
  std::shared_ptr<Work> reduce_scatter_sum(torch::Tensor, torch::Tensor, const std::string&) override { return nullptr; }
  std::shared_ptr<Work> all_gather(torch::Tensor, torch::Tensor, const std::string&) override { return nullptr; }
  std::shared_ptr<Work> broadcast(torch::Tensor, int, const std::string&) override { return nullptr; }
  void barrier(const std::string&) override {}
  std::shared_ptr<Mark> mark() override { return nullptr; }
  CommunicatorStats stats() const override { return {}; }

 private:
  Teardown* ended_;
};

TEST(Teardown, ACommunicatorLeftByAnExceptionIsAbandonedOtherwiseFinished) {
  Teardown ended = Teardown::kAbandon;
  { RecordingCommunicator normal(&ended); }
  EXPECT_EQ(ended, Teardown::kFinish);
  try {
    RecordingCommunicator unwound(&ended);
    throw std::runtime_error("CUDA out of memory in backward");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(ended, Teardown::kAbandon);
  // Made while an exception is already being handled, and left normally: finished.
  try {
    throw std::runtime_error("earlier error");
  } catch (const std::runtime_error&) {
    { RecordingCommunicator in_handler(&ended); }
    EXPECT_EQ(ended, Teardown::kFinish);
  }
}

TEST(Driver, VersionFromProprietaryAndOpenKernelModules) {
  EXPECT_EQ(
      parse_nvidia_driver_version("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.183.01  Sun May 12 19:39:15 UTC 2024"),
      "535.183.01");
  EXPECT_EQ(parse_nvidia_driver_version(
                "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159  Release Build  (dvs-builder@U16-I3-B03-4-1)  "
                "Thu Oct  2 20:37:04 UTC 2025"),
            "580.159");
  EXPECT_EQ(parse_nvidia_driver_version("NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  570.86.15  Release Build"),
            "570.86.15");
  EXPECT_EQ(parse_nvidia_driver_version("NVRM version: no number here"), "");
  EXPECT_EQ(parse_nvidia_driver_version(""), "");
}

}  // namespace
}  // namespace mpibert
