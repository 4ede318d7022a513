// Run by ctest under `mpiexec -n 1|2|3`: the MPI Communicator (tensor collectives on a worker
// thread) and the host collectives of host_collectives.hpp give exactly the closed-form results whatever the
// rank count. Values are chosen so that every partial sum is exactly representable: results are
// compared for equality, not within a tolerance.
//
// Every rank runs every collective unconditionally (EXPECT, not ASSERT, between collectives), so
// a failed check on one rank does not leave the ranks out of step for the tests that follow.
#include <gtest/gtest.h>
#include <mpi.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "mpibert/comm/communicator.hpp"
#include "mpibert/core/error.hpp"
#include "mpibert/core/logging.hpp"
#include "mpibert/runtime/host_collectives.hpp"

namespace mpibert {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int64_t kThreeMegabytes = 3 * 1024 * 1024;

// "" when `got` equals `want` element for element (same dtype and shape), else a description of
// the first difference.
std::string difference(const torch::Tensor& got, const torch::Tensor& want) {
  std::ostringstream out;
  if (got.scalar_type() != want.scalar_type()) {
    out << "dtype " << got.scalar_type() << " != " << want.scalar_type();
    return out.str();
  }
  if (got.sizes() != want.sizes()) {
    out << "shape " << got.sizes() << " != " << want.sizes();
    return out.str();
  }
  if (torch::equal(got, want)) return "";
  const auto g = got.reshape({-1}).to(torch::kDouble), w = want.reshape({-1}).to(torch::kDouble);
  const auto differs = g.ne(w);
  if (got.scalar_type() == torch::kLong) {  // doubles lose the low bits of large int64 values
    const auto gl = got.reshape({-1}), wl = want.reshape({-1});
    const auto ne = gl.ne(wl);
    const int64_t count = ne.sum().item<int64_t>();
    const int64_t first = ne.nonzero().index({0, 0}).item<int64_t>();
    out << count << " of " << got.numel() << " elements differ; first at " << first << ": got " << gl[first].item<int64_t>()
        << ", want " << wl[first].item<int64_t>();
    return out.str();
  }
  const int64_t count = differs.sum().item<int64_t>();
  const int64_t first = differs.nonzero().index({0, 0}).item<int64_t>();
  out.precision(17);
  out << count << " of " << got.numel() << " elements differ; first at " << first << ": got " << g[first].item<double>()
      << ", want " << w[first].item<double>();
  return out.str();
}

// Element i of rank r's all-reduce input, and the sum over ranks 0..n-1 in closed form. Float:
// small integers plus quarters (exact in float32 for these sizes); double: integers beyond 2^32
// plus a binary fraction; int64: values beyond 2^40 with a rank-dependent sign.
torch::Tensor all_reduce_input(torch::ScalarType dtype, int64_t numel, int r) {
  const auto i = torch::arange(numel, torch::kLong);
  switch (dtype) {
    case torch::kFloat: return (i.remainder(997).to(torch::kFloat) * (r + 1) + 0.25f * static_cast<float>(r + 1));
    case torch::kDouble: return i.to(torch::kDouble) * (r + 1) + std::ldexp(1.0, 33) * r + std::ldexp(1.0, -7) * (r + 1);
    case torch::kLong: return (i * (2 * r - 1)) + (int64_t{1} << 40) * (r + 1);
    default: throw std::logic_error("all_reduce_input: dtype not covered");
  }
}

torch::Tensor all_reduce_expected(torch::ScalarType dtype, int64_t numel, int n) {
  const auto i = torch::arange(numel, torch::kLong);
  const int64_t triangle = static_cast<int64_t>(n) * (n + 1) / 2;   // sum of r+1
  const int64_t ranks_sum = static_cast<int64_t>(n) * (n - 1) / 2;  // sum of r
  switch (dtype) {
    case torch::kFloat:
      return i.remainder(997).to(torch::kFloat) * static_cast<float>(triangle) + 0.25f * static_cast<float>(triangle);
    case torch::kDouble:
      return i.to(torch::kDouble) * static_cast<double>(triangle) + std::ldexp(1.0, 33) * static_cast<double>(ranks_sum) +
             std::ldexp(1.0, -7) * static_cast<double>(triangle);
    case torch::kLong: return i * (2 * ranks_sum - n) + (int64_t{1} << 40) * triangle;
    default: throw std::logic_error("all_reduce_expected: dtype not covered");
  }
}

int64_t element_size(torch::ScalarType dtype) { return static_cast<int64_t>(c10::elementSize(dtype)); }

// Every test runs on both algorithms: Open MPI's, and mpibert's ring from the first byte (so that
// blocks of one element and of none, on 2 and 3 ranks, go through it).
class CommTest : public ::testing::TestWithParam<MpiAlgorithm> {
 protected:
  void SetUp() override {
    rank_ = world_rank();
    size_ = world_size();
    MpiCollectives collectives;
    collectives.algorithm = GetParam();
    collectives.ring_min_bytes = 0;
    comm_ = make_mpi_communicator(60, collectives);
  }
  void TearDown() override { comm_.reset(); }

  int rank_ = 0, size_ = 1;
  std::unique_ptr<Communicator> comm_;
};

TEST_P(CommTest, RankSizeAndBackendAreMpiWorld) {
  int rank = -1, size = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  EXPECT_EQ(comm_->rank(), rank);
  EXPECT_EQ(comm_->size(), size);
  EXPECT_EQ(comm_->backend(), "mpi");
}

TEST_P(CommTest, AllReduceSumIsTheClosedFormSumInPlace) {
  for (const auto dtype : {torch::kFloat, torch::kDouble, torch::kLong}) {
    for (const int64_t numel : {int64_t{1}, int64_t{1000}, kThreeMegabytes / element_size(dtype)}) {
      SCOPED_TRACE(::testing::Message() << c10::toString(dtype) << ", " << numel << " elements");
      auto tensor = all_reduce_input(dtype, numel, rank_);
      const void* data = tensor.data_ptr();
      comm_->all_reduce_sum(tensor, "all-reduce test")->wait();
      EXPECT_EQ(tensor.data_ptr(), data) << "the result must be written in place";
      EXPECT_EQ(difference(tensor, all_reduce_expected(dtype, numel, size_)), "");
    }
  }
}

TEST_P(CommTest, AllReduceOfANarrowedViewLeavesTheRestOfTheStorageAlone) {
  // A contiguous view with a storage offset: only elements [100, 600) take part.
  auto whole = torch::full({1000}, static_cast<float>(-1 - rank_));
  auto view = whole.narrow(0, 100, 500);
  view.copy_(all_reduce_input(torch::kFloat, 500, rank_));
  comm_->all_reduce_sum(view, "narrowed all-reduce")->wait();
  EXPECT_EQ(difference(view, all_reduce_expected(torch::kFloat, 500, size_)), "");
  EXPECT_EQ(difference(whole.narrow(0, 0, 100), torch::full({100}, static_cast<float>(-1 - rank_))), "");
  EXPECT_EQ(difference(whole.narrow(0, 600, 400), torch::full({400}, static_cast<float>(-1 - rank_))), "");
}

TEST_P(CommTest, OperationsQueuedBeforeAnyWaitCompleteInOrder) {
  const std::vector<std::pair<torch::ScalarType, int64_t>> specs = {
      {torch::kFloat, 1000}, {torch::kDouble, kThreeMegabytes / 8}, {torch::kLong, 1}, {torch::kFloat, kThreeMegabytes / 4}};
  std::vector<torch::Tensor> tensors;
  std::vector<std::shared_ptr<Work>> works;
  for (const auto& [dtype, numel] : specs) tensors.push_back(all_reduce_input(dtype, numel, rank_));
  for (size_t k = 0; k < tensors.size(); ++k)
    works.push_back(comm_->all_reduce_sum(tensors[k], "queued all-reduce " + std::to_string(k)));
  // Once the last is complete, every earlier one is.
  works.back()->wait();
  for (size_t k = 0; k + 1 < works.size(); ++k) EXPECT_TRUE(works[k]->done()) << "operation " << k << " completed out of order";
  for (size_t k = works.size(); k-- > 0;) works[k]->wait();
  for (size_t k = 0; k < specs.size(); ++k) {
    SCOPED_TRACE(::testing::Message() << "operation " << k);
    EXPECT_EQ(difference(tensors[k], all_reduce_expected(specs[k].first, specs[k].second, size_)), "");
  }
}

TEST_P(CommTest, CommunicatorBarrierWaitsForQueuedOperations) {
  auto tensor = all_reduce_input(torch::kDouble, 1000, rank_);
  auto work = comm_->all_reduce_sum(tensor, "all-reduce before barrier");
  comm_->barrier("communicator barrier test");
  // No wait(): the barrier runs after the queued all-reduce, so it is complete already.
  EXPECT_TRUE(work->done()) << "the all-reduce had not completed when barrier() returned";
  EXPECT_EQ(difference(tensor, all_reduce_expected(torch::kDouble, 1000, size_)), "");
  work->wait();
}

TEST_P(CommTest, ReduceScatterGivesEachRankTheSumOfItsBlock) {
  for (const auto dtype : {torch::kFloat, torch::kDouble, torch::kLong}) {
    for (const int64_t k : {int64_t{1}, int64_t{1000}}) {
      SCOPED_TRACE(::testing::Message() << c10::toString(dtype) << ", blocks of " << k);
      // Element j of block b on rank r: (r+1)*100000 + b*1000 + j%997.
      auto block = torch::arange(size_, torch::kLong).unsqueeze(1) * 1000 +
                   torch::arange(k, torch::kLong).remainder(997).unsqueeze(0);
      auto input = (block + int64_t{100000} * (rank_ + 1)).reshape({-1}).to(dtype);
      auto output = torch::full({k}, -7, torch::TensorOptions().dtype(dtype));
      const auto input_before = input.clone();
      comm_->reduce_scatter_sum(input, output, "reduce-scatter test")->wait();
      const int64_t n = size_;
      auto expected =
          (int64_t{100000} * n * (n + 1) / 2 + n * (rank_ * 1000 + torch::arange(k, torch::kLong).remainder(997))).to(dtype);
      EXPECT_EQ(difference(output, expected), "");
      EXPECT_EQ(difference(input, input_before), "") << "reduce-scatter must not change its input";
    }
  }
}

// Block b of an all-gather: rank b's values.
torch::Tensor gather_block(torch::ScalarType dtype, int64_t k, int b) {
  return (torch::arange(k, torch::kLong) * 3 + int64_t{1000000} * (b + 1)).to(dtype);
}

TEST_P(CommTest, AllGatherInPlace) {
  for (const auto dtype : {torch::kFloat, torch::kLong}) {
    for (const int64_t k : {int64_t{1}, int64_t{1000}}) {
      SCOPED_TRACE(::testing::Message() << c10::toString(dtype) << ", blocks of " << k);
      auto output = torch::full({size_ * k}, -5, torch::TensorOptions().dtype(dtype));
      auto input = output.narrow(0, rank_ * k, k);
      input.copy_(gather_block(dtype, k, rank_));
      comm_->all_gather(input, output, "in-place all-gather test")->wait();
      std::vector<torch::Tensor> blocks;
      for (int b = 0; b < size_; ++b) blocks.push_back(gather_block(dtype, k, b));
      EXPECT_EQ(difference(output, torch::cat(blocks)), "");
    }
  }
}

TEST_P(CommTest, AllGatherOutOfPlace) {
  for (const auto dtype : {torch::kDouble, torch::kLong}) {
    for (const int64_t k : {int64_t{1}, int64_t{1000}}) {
      SCOPED_TRACE(::testing::Message() << c10::toString(dtype) << ", blocks of " << k);
      auto input = gather_block(dtype, k, rank_);
      auto output = torch::full({size_ * k}, -5, torch::TensorOptions().dtype(dtype));
      comm_->all_gather(input, output, "all-gather test")->wait();
      std::vector<torch::Tensor> blocks;
      for (int b = 0; b < size_; ++b) blocks.push_back(gather_block(dtype, k, b));
      EXPECT_EQ(difference(output, torch::cat(blocks)), "");
      EXPECT_EQ(difference(input, gather_block(dtype, k, rank_)), "") << "all-gather must not change its input";
    }
  }
}

TEST_P(CommTest, BroadcastFromTheFirstAndTheLastRank) {
  for (const int root : {0, size_ - 1}) {
    for (const auto dtype : {torch::kFloat, torch::kDouble, torch::kLong}) {
      SCOPED_TRACE(::testing::Message() << "root " << root << ", " << c10::toString(dtype));
      const int64_t numel = 4096 + 7;
      auto root_values = (torch::arange(numel, torch::kLong) * 5 - 11 + int64_t{1000} * root).to(dtype);
      auto tensor = rank_ == root ? root_values.clone() : torch::full({numel}, -1 - rank_, torch::TensorOptions().dtype(dtype));
      comm_->broadcast(tensor, root, "broadcast test")->wait();
      EXPECT_EQ(difference(tensor, root_values), "");
    }
  }
}

TEST_P(CommTest, StatsCountOperationsAndBytes) {
  const int64_t k = 1000;
  // `issued`: a mark taken before the operation was queued; the whole transfer came after it, and
  // none of it after a mark taken once it completed.
  auto check = [&](const CommunicatorStats& before, const std::shared_ptr<Work>& work, const std::shared_ptr<Mark>& issued,
                   int64_t bytes, const char* name) {
    SCOPED_TRACE(name);
    const CommunicatorStats after = comm_->stats();
    EXPECT_EQ(after.operations, before.operations + 1);
    EXPECT_EQ(after.bytes, before.bytes + bytes);
    EXPECT_TRUE(work->done());
    EXPECT_GE(work->seconds(), 0.0);
    EXPECT_DOUBLE_EQ(work->seconds_after(*issued), work->seconds()) << "the transfer began before it was queued";
    EXPECT_EQ(work->seconds_after(*comm_->mark()), 0.0) << "a transfer after its completion";
    EXPECT_GE(after.busy_seconds, before.busy_seconds);
    EXPECT_NEAR(after.busy_seconds - before.busy_seconds, work->seconds(), 1e-9);
  };

  const CommunicatorStats fresh = comm_->stats();
  EXPECT_EQ(fresh.operations, 0);
  EXPECT_EQ(fresh.bytes, 0);
  EXPECT_EQ(fresh.busy_seconds, 0.0);

  auto tensor = torch::ones({k}, torch::kDouble);
  auto before = comm_->stats();
  auto issued = comm_->mark();
  auto work = comm_->all_reduce_sum(tensor, "stats all-reduce");
  work->wait();
  check(before, work, issued, k * 8, "all-reduce");

  auto input = torch::ones({size_ * k}, torch::kFloat), output = torch::zeros({k}, torch::kFloat);
  before = comm_->stats();
  issued = comm_->mark();
  work = comm_->reduce_scatter_sum(input, output, "stats reduce-scatter");
  work->wait();
  check(before, work, issued, size_ * k * 4, "reduce-scatter (bytes of the input)");

  auto gathered = torch::zeros({size_ * k}, torch::kLong), local = torch::ones({k}, torch::kLong);
  before = comm_->stats();
  issued = comm_->mark();
  work = comm_->all_gather(local, gathered, "stats all-gather");
  work->wait();
  check(before, work, issued, size_ * k * 8, "all-gather (bytes of the output)");

  before = comm_->stats();
  issued = comm_->mark();
  work = comm_->broadcast(tensor, 0, "stats broadcast");
  work->wait();
  check(before, work, issued, k * 8, "broadcast");

  // Two queued together: both counted once they are waited for.
  before = comm_->stats();
  auto a = torch::ones({3}, torch::kFloat), b = torch::ones({5}, torch::kLong);
  auto wa = comm_->all_reduce_sum(a, "stats queued a");
  auto wb = comm_->all_reduce_sum(b, "stats queued b");
  wb->wait();
  wa->wait();
  const auto after = comm_->stats();
  EXPECT_EQ(after.operations, before.operations + 2);
  EXPECT_EQ(after.bytes, before.bytes + 3 * 4 + 5 * 8);
}

// Checks that `call` throws std::invalid_argument on this rank, and that the ranks agree.
template <class F>
void expect_invalid_argument(F&& call, const char* name) {
  bool threw_invalid = false;
  std::string other;
  try {
    call();
  } catch (const std::invalid_argument&) {
    threw_invalid = true;
  } catch (const std::exception& e) {
    other = e.what();
  }
  EXPECT_TRUE(threw_invalid) << name << (other.empty() ? ": did not throw" : ": threw something else: " + other);
  EXPECT_TRUE(all_ranks_ok(threw_invalid)) << name << ": some rank did not throw std::invalid_argument";
}

TEST_P(CommTest, InvalidTensorsThrowBeforeAnythingIsQueued) {
  const int64_t k = 4;
  const auto before = comm_->stats();
  auto square = torch::arange(16, torch::kFloat).reshape({4, 4});
  auto transposed = square.t();                                                               // not contiguous
  auto strided = torch::zeros({2 * size_ * k}, torch::kFloat).slice(0, 0, 2 * size_ * k, 2);  // not contiguous
  ASSERT_FALSE(transposed.is_contiguous());
  ASSERT_FALSE(strided.is_contiguous());

  expect_invalid_argument([&] { comm_->all_reduce_sum(transposed, "bad all-reduce"); }, "all-reduce of a transposed tensor");
  expect_invalid_argument([&] { comm_->broadcast(transposed, 0, "bad broadcast"); }, "broadcast of a transposed tensor");
  expect_invalid_argument([&] { comm_->reduce_scatter_sum(strided, torch::zeros({k}), "bad reduce-scatter"); },
                          "reduce-scatter of a strided input");
  expect_invalid_argument(
      [&] { comm_->reduce_scatter_sum(torch::zeros({size_ * k}), torch::zeros({2 * k}).slice(0, 0, 2 * k, 2), "bad"); },
      "reduce-scatter into a strided output");
  expect_invalid_argument([&] { comm_->reduce_scatter_sum(torch::zeros({size_ * k + 1}), torch::zeros({k}), "bad"); },
                          "reduce-scatter input one element too long");
  expect_invalid_argument([&] { comm_->reduce_scatter_sum(torch::zeros({size_ * k}), torch::zeros({k + 1}), "bad"); },
                          "reduce-scatter output one element too long");
  expect_invalid_argument([&] { comm_->reduce_scatter_sum(torch::zeros({size_ * k}), torch::zeros({k}, torch::kDouble), "bad"); },
                          "reduce-scatter with different dtypes");
  expect_invalid_argument([&] { comm_->all_gather(strided.narrow(0, 0, k), torch::zeros({size_ * k}), "bad"); },
                          "all-gather of a strided input");
  expect_invalid_argument([&] { comm_->all_gather(torch::zeros({k}), torch::zeros({size_ * k + 1}), "bad"); },
                          "all-gather output one element too long");
  expect_invalid_argument([&] { comm_->all_gather(torch::zeros({k + 1}), torch::zeros({size_ * k}), "bad"); },
                          "all-gather input one element too long");
  expect_invalid_argument([&] { comm_->all_gather(torch::zeros({k}, torch::kLong), torch::zeros({size_ * k}), "bad"); },
                          "all-gather with different dtypes");

  // Nothing was queued: the next operation is the first, on every rank, and pairs up correctly.
  auto tensor = all_reduce_input(torch::kLong, 1000, rank_);
  comm_->all_reduce_sum(tensor, "all-reduce after the errors")->wait();
  EXPECT_EQ(difference(tensor, all_reduce_expected(torch::kLong, 1000, size_)), "");
  const auto after = comm_->stats();
  EXPECT_EQ(after.operations, before.operations + 1) << "an invalid call queued an operation";
  EXPECT_EQ(after.bytes, before.bytes + 1000 * 8);
}

// An unsupported dtype is refused by the caller's thread, before anything is queued, so that the
// ranks stay in step.
TEST_P(CommTest, UnsupportedDtypeThrowsBeforeAnythingIsQueued) {
  const auto before = comm_->stats();
  expect_invalid_argument([&] { comm_->all_reduce_sum(torch::zeros({4}, torch::kHalf), "half all-reduce"); },
                          "all-reduce of float16");
  expect_invalid_argument([&] { comm_->broadcast(torch::zeros({4}, torch::kBool), 0, "bool broadcast"); }, "broadcast of bool");
  auto tensor = torch::ones({4}, torch::kFloat);
  comm_->all_reduce_sum(tensor, "all-reduce after the errors")->wait();
  EXPECT_EQ(difference(tensor, torch::full({4}, static_cast<float>(size_))), "");
  EXPECT_EQ(comm_->stats().operations, before.operations + 1);
}

// Float sums depend on the order of addition: every rank must still hold the same bits (the ring
// sums each block on one rank and forwards it), within round-off of the exact sum.
TEST_P(CommTest, FloatSumsAreTheSameBitsOnEveryRank) {
  const int64_t numel = 100003;
  auto inputs_of = [&](int rank) {
    torch::manual_seed(100 + rank);
    return torch::randn({numel}, torch::kFloat);
  };
  torch::Tensor exact = torch::zeros({numel}, torch::kDouble);
  for (int r = 0; r < size_; ++r) exact += inputs_of(r).to(torch::kDouble);
  torch::Tensor tensor = inputs_of(rank_);
  comm_->all_reduce_sum(tensor, "float all-reduce")->wait();
  EXPECT_LE((tensor.to(torch::kDouble) - exact).abs().max().item<double>(), 1e-5);
  torch::Tensor everyone = torch::empty({size_ * numel}, torch::kFloat);
  comm_->all_gather(tensor, everyone, "gather of the sums")->wait();
  for (int r = 0; r < size_; ++r) EXPECT_TRUE(torch::equal(everyone.narrow(0, r * numel, numel), tensor)) << "rank " << r;
}

// bf16, which MPI cannot add: the backend's own sum. Small integers are exact in bf16 (up to 256),
// so every collective gives the closed form exactly, on both algorithms, for sizes up to a ring's
// worth of blocks.
TEST_P(CommTest, Bf16CollectivesOfSmallIntegersAreExact) {
  const auto bf16 = torch::TensorOptions().dtype(torch::kBFloat16);
  const int64_t n = size_, triangle = n * (n + 1) / 2;
  for (const int64_t k : {int64_t{1}, int64_t{1000}, kThreeMegabytes / 2 / size_}) {
    SCOPED_TRACE(::testing::Message() << "blocks of " << k);
    const auto pattern = torch::arange(n * k, torch::kLong).remainder(7);
    auto tensor = (pattern * (rank_ + 1)).to(torch::kBFloat16);
    comm_->all_reduce_sum(tensor, "bf16 all-reduce test")->wait();
    EXPECT_EQ(difference(tensor, (pattern * triangle).to(torch::kBFloat16)), "");

    auto input = (pattern * (rank_ + 1)).to(torch::kBFloat16), output = torch::full({k}, -7, bf16);
    comm_->reduce_scatter_sum(input, output, "bf16 reduce-scatter test")->wait();
    EXPECT_EQ(difference(output, (pattern.narrow(0, rank_ * k, k) * triangle).to(torch::kBFloat16)), "");

    auto gathered = torch::full({n * k}, -7, bf16);
    comm_->all_gather(pattern.narrow(0, rank_ * k, k).to(torch::kBFloat16), gathered, "bf16 all-gather test")->wait();
    EXPECT_EQ(difference(gathered, pattern.to(torch::kBFloat16)), "");
  }
}

// Each bf16 addition rounds once, to nearest even, as NCCL's: on 2 ranks the sum is exactly torch's
// bf16 a + b; on 3 it is, element by element, one of the three orders of addition, and the same
// bits on every rank.
TEST_P(CommTest, Bf16SumsRoundOncePerAdditionAndAgreeOnEveryRank) {
  const int64_t numel = 6 * 16667;  // blocks of whole elements on 1, 2 and 3 ranks
  auto inputs_of = [&](int rank) {
    torch::manual_seed(200 + rank);
    return torch::randn({numel}, torch::kFloat).to(torch::kBFloat16);
  };
  std::vector<torch::Tensor> b;
  for (int r = 0; r < size_; ++r) b.push_back(inputs_of(r));
  std::vector<torch::Tensor> candidates = {b[0]};
  if (size_ == 2) candidates = {b[0] + b[1]};
  if (size_ == 3) candidates = {(b[0] + b[1]) + b[2], (b[0] + b[2]) + b[1], (b[1] + b[2]) + b[0]};
  auto matches_one = [&](const torch::Tensor& got, int64_t begin) {
    torch::Tensor matched = torch::zeros({got.numel()}, torch::kBool);
    for (const auto& candidate : candidates) matched |= got.eq(candidate.narrow(0, begin, got.numel()));
    return matched.all().item<bool>();
  };

  torch::Tensor sum = inputs_of(rank_);
  comm_->all_reduce_sum(sum, "bf16 all-reduce")->wait();
  EXPECT_TRUE(matches_one(sum, 0));
  torch::Tensor everyone = torch::empty({size_ * numel}, torch::kBFloat16);
  comm_->all_gather(sum, everyone, "gather of the bf16 sums")->wait();
  for (int r = 0; r < size_; ++r) EXPECT_TRUE(torch::equal(everyone.narrow(0, r * numel, numel), sum)) << "rank " << r;

  const int64_t block = numel / size_;
  torch::Tensor mine = torch::empty({block}, torch::kBFloat16);
  comm_->reduce_scatter_sum(inputs_of(rank_), mine, "bf16 reduce-scatter")->wait();
  EXPECT_TRUE(matches_one(mine, rank_ * block));
}

INSTANTIATE_TEST_SUITE_P(Algorithms, CommTest, ::testing::Values(MpiAlgorithm::kOpenMpi, MpiAlgorithm::kRing),
                         [](const auto& info) { return std::string(mpi_algorithm_name(info.param)); });

// ---- Host collectives (host_collectives.hpp) ----

class HostCollectives : public ::testing::Test {
 protected:
  int rank_ = world_rank(), size_ = world_size();
};

TEST_F(HostCollectives, SumOverRanks) {
  const double r = rank_;
  const double n = size_;
  // Exact in double: integers, a large offset and binary fractions.
  const auto sum = sum_over_ranks({1.0, r, -2.0 * r, std::ldexp(1.0, 40) + r, 0.125 * (r + 1)}, "sum test");
  const double ranks = n * (n - 1) / 2;
  const std::vector<double> expected = {n, ranks, -2 * ranks, std::ldexp(1.0, 40) * n + ranks, 0.125 * n * (n + 1) / 2};
  EXPECT_EQ(sum, expected);
  EXPECT_EQ(sum_over_ranks({}, "empty sum test"), std::vector<double>{});
  std::vector<double> big(10000);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<double>(i) * (rank_ + 1);
  const auto big_sum = sum_over_ranks(big, "large sum test");
  std::vector<double> big_expected(big.size());
  for (size_t i = 0; i < big.size(); ++i) big_expected[i] = static_cast<double>(i) * n * (n + 1) / 2;
  EXPECT_EQ(big_sum, big_expected);
}

TEST_F(HostCollectives, MaxOverRanks) {
  const double r = rank_;
  const double n = size_;
  const auto max = max_over_ranks({r, -r, 5.0, rank_ == size_ - 1 ? 1e300 : -1e300, r == 0 ? 2.5 : -7.0}, "max test");
  const std::vector<double> expected = {n - 1, 0.0, 5.0, 1e300, 2.5};
  EXPECT_EQ(max, expected);
  EXPECT_EQ(max_over_ranks(static_cast<double>(rank_ * 3)), 3.0 * (size_ - 1));
}

std::string string_of_rank(int r) {
  if (r % 3 == 1) return "";  // rank 1 sends nothing
  return "rank " + std::to_string(r) + ":" + std::string(static_cast<size_t>(r) * 1000 + 3, static_cast<char>('a' + r)) +
         std::string(1, '\0') + "end";
}

TEST_F(HostCollectives, AllGatherStringsOfDifferentLengths) {
  const auto all = all_gather_strings(string_of_rank(rank_));
  ASSERT_EQ(all.size(), static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) EXPECT_EQ(all[static_cast<size_t>(r)], string_of_rank(r)) << "string of rank " << r;
  // Every rank empty.
  const auto empty = all_gather_strings("");
  EXPECT_EQ(empty, std::vector<std::string>(static_cast<size_t>(size_)));
}

std::vector<float> floats_of_rank(int r) {
  const size_t count = r == 1 ? 0 : static_cast<size_t>(r) * 1000 + 2;  // rank 1 has nothing
  std::vector<float> values(count);
  for (size_t i = 0; i < count; ++i) values[i] = static_cast<float>(r) * 100000.0f + static_cast<float>(i) + 0.5f;
  return values;
}

TEST_F(HostCollectives, GatherFloatsOfDifferentLengthsToRoot) {
  const auto gathered = gather_to_root(floats_of_rank(rank_), "gather test");
  if (rank_ == 0) {
    std::vector<float> expected;
    for (int r = 0; r < size_; ++r) {
      const auto part = floats_of_rank(r);
      expected.insert(expected.end(), part.begin(), part.end());
    }
    EXPECT_EQ(gathered, expected);
  } else {
    EXPECT_TRUE(gathered.empty()) << "rank " << rank_ << " got " << gathered.size() << " values";
  }
}

TEST_F(HostCollectives, GatherInt64ToRoot) {
  const std::vector<int64_t> local = {rank_, (int64_t{1} << 40) + rank_, -rank_};
  const auto gathered = gather_to_root(local);
  if (rank_ == 0) {
    std::vector<int64_t> expected;
    for (int64_t r = 0; r < size_; ++r) expected.insert(expected.end(), {r, (int64_t{1} << 40) + r, -r});
    EXPECT_EQ(gathered, expected);
  } else {
    EXPECT_TRUE(gathered.empty());
  }
}

TEST_F(HostCollectives, BroadcastStringFromTheFirstAndTheLastRank) {
  for (const int root : {0, size_ - 1}) {
    SCOPED_TRACE(::testing::Message() << "root " << root);
    const std::string root_value = "from root " + std::to_string(root) + std::string(1, '\0') + std::string(100000, 'z');
    // Other ranks pass longer and shorter strings: the result has the root's length whatever they held.
    const std::string local = rank_ == root ? root_value : std::string(rank_ % 2 ? 300000 : 5, 'q');
    const std::string got = broadcast_string(local, root, "broadcast string test");
    EXPECT_EQ(got.size(), root_value.size());
    EXPECT_TRUE(got == root_value);
  }
  // An empty string from the root empties everyone's.
  const std::string got = broadcast_string(rank_ == size_ - 1 ? std::string() : std::string("not empty"), size_ - 1, "empty");
  EXPECT_EQ(got, "");
}

TEST_F(HostCollectives, BarrierWaitsForTheLastRank) {
  MPI_Barrier(MPI_COMM_WORLD);
  const auto start = Clock::now();
  if (rank_ == size_ - 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  barrier("barrier test");
  const double waited = std::chrono::duration<double>(Clock::now() - start).count();
  // Every rank left the barrier only after the last one, which slept, got there.
  EXPECT_GE(waited, 0.25) << "rank " << rank_ << " left the barrier early";
}

TEST_F(HostCollectives, AllRanksOkAndLowestFailingRank) {
  EXPECT_TRUE(all_ranks_ok(true));
  EXPECT_FALSE(all_ranks_ok(rank_ != size_ - 1));
  EXPECT_EQ(lowest_failing_rank(true), -1);
  EXPECT_EQ(lowest_failing_rank(rank_ == 0 && size_ > 1), size_ > 1 ? 1 : 0);
}

}  // namespace
}  // namespace mpibert
