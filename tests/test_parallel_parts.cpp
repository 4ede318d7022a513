// The gradient reducer alone, over a fake one-rank communicator that records what is issued: the
// plan's order whatever order backward completes the groups in, nothing on accumulation
// micro-steps, groups without gradients reduced at the end, gathers forced through the plan, and
// every reduction waited for and counted.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "fake_communicator.hpp"
#include "flat_groups.hpp"
#include "gradient_reducer.hpp"
#include "hsdp.hpp"
#include "slices.hpp"

namespace mpibert {
namespace {

// Three parameters, each a bucket of its own (capacities of one byte): bucket 0 holds c, 1 holds
// b, 2 holds a (buckets go in reverse registration order).
class ReducerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    parameters_ = {torch::ones({2}).requires_grad_(), torch::ones({3}).requires_grad_(), torch::ones({4}).requires_grad_()};
    groups_ = group_into_buckets(parameters_, 1e-6, 1e-6, std::nullopt);
    group_of_ = attach_gradient_views(groups_, parameters_, 1);
  }

  GroupActions recording_actions() {
    GroupActions actions;
    actions.reduce = [this](size_t g) {
      return IssuedReduction{comm_.all_reduce_sum(groups_[g].grads, "reduce " + std::to_string(g)),
                             static_cast<int64_t>(groups_[g].grads.nbytes())};
    };
    actions.gather = [this](size_t g) { comm_.broadcast(groups_[g].grads, 0, "gather " + std::to_string(g)); };
    actions.before_accumulation = [this](size_t g) { events_.push_back("accumulate " + std::to_string(g)); };
    actions.complete = [this](size_t g) { events_.push_back("complete " + std::to_string(g)); };
    actions.closed = [this] { events_.push_back("closed"); };
    return actions;
  }

  // Backward of a sum over the parameters `which` (indices into parameters_).
  void backward_of(const std::vector<size_t>& which) {
    torch::Tensor loss = torch::zeros({});
    for (size_t k : which) loss = loss + parameters_[k].sum();
    loss.backward();
  }

  std::vector<torch::Tensor> parameters_;
  std::vector<FlatGroup> groups_;
  std::vector<size_t> group_of_;
  test::FakeCommunicator comm_{/*complete_at_once=*/false};
  std::vector<std::string> events_;
};

TEST_F(ReducerTest, GroupsAreReducedInThePlansOrderAsSoonAsEachIsReady) {
  GradientReducer reducer(parameters_, groups_, group_of_, comm_, recording_actions(), "buckets are");
  reducer.begin_backward(true, reductions_in_group_order(groups_.size()));
  backward_of({0});  // a: bucket 2 is complete, but buckets 0 and 1 come first
  EXPECT_TRUE(comm_.operations().empty());
  backward_of({2});  // c: bucket 0 goes; bucket 1 still waits for b
  EXPECT_EQ(comm_.operations(), (std::vector<std::string>{"reduce 0"}));
  backward_of({1});  // b: bucket 1, then the waiting bucket 2
  EXPECT_EQ(comm_.operations(), (std::vector<std::string>{"reduce 0", "reduce 1", "reduce 2"}));
  EXPECT_EQ(events_,
            (std::vector<std::string>{"accumulate 2", "complete 2", "accumulate 0", "complete 0", "accumulate 1", "complete 1"}));
  for (const auto& work : comm_.works()) EXPECT_FALSE(work->waited());
  reducer.finish_step();
  for (const auto& work : comm_.works()) EXPECT_TRUE(work->waited());
  EXPECT_EQ(events_.back(), "closed");
  EXPECT_EQ(reducer.stats().bytes, (2 + 3 + 4) * 4);
}

TEST_F(ReducerTest, AccumulationMicroStepsIssueNothing) {
  GradientReducer reducer(parameters_, groups_, group_of_, comm_, recording_actions(), "buckets are");
  reducer.begin_backward(false, reductions_in_group_order(groups_.size()));
  backward_of({0, 1, 2});
  reducer.finish_step();
  EXPECT_TRUE(comm_.operations().empty());
  EXPECT_EQ(reducer.stats().bytes, 0);
  reducer.begin_backward(true, reductions_in_group_order(groups_.size()));
  backward_of({0, 1, 2});
  EXPECT_EQ(comm_.operations().size(), 3u);
}

// A parameter that got no gradient (bucket 1's b here) is reduced all the same at the end, so that
// every rank issues the same collectives; the plan's order holds.
TEST_F(ReducerTest, GroupsWithoutGradientsAreReducedAtTheEndInOrder) {
  GradientReducer reducer(parameters_, groups_, group_of_, comm_, recording_actions(), "buckets are");
  reducer.begin_backward(true, reductions_in_group_order(groups_.size()));
  backward_of({0, 2});
  EXPECT_EQ(comm_.operations(), (std::vector<std::string>{"reduce 0"}));
  reducer.finish_step();
  EXPECT_EQ(comm_.operations(), (std::vector<std::string>{"reduce 0", "reduce 1", "reduce 2"}));
}

// fsdp's use: a planned gather can be forced out (with everything planned before it, ready or
// not) when a unit's backward needs its parameters now.
TEST_F(ReducerTest, IssueThroughForcesThePlanUpToAGather) {
  GradientReducer reducer(parameters_, groups_, group_of_, comm_, recording_actions(), "units are");
  reducer.begin_backward(true, {{PlannedCollective::kReduce, 0},
                                {PlannedCollective::kGather, 1},
                                {PlannedCollective::kReduce, 1},
                                {PlannedCollective::kGather, 2},
                                {PlannedCollective::kReduce, 2}});
  reducer.mark_ready(PlannedCollective::kGather, 1);
  EXPECT_TRUE(comm_.operations().empty());  // reduce 0 is not ready
  reducer.issue_through(PlannedCollective::kGather, 1);
  EXPECT_EQ(comm_.operations(), (std::vector<std::string>{"reduce 0", "gather 1"}));
  backward_of({1});
  EXPECT_EQ(comm_.operations(), (std::vector<std::string>{"reduce 0", "gather 1", "reduce 1"}));
  reducer.finish_step();
  EXPECT_EQ(comm_.operations(), (std::vector<std::string>{"reduce 0", "gather 1", "reduce 1", "gather 2", "reduce 2"}));
}

// hsdp's reduction of three groups into their slices, over a shard group and a replica
// communicator that log into one list: the interleaving of the two communicators' operations,
// with the shard group's reduce-scatters completing at once or only when waited for.
std::vector<std::string> hsdp_interleaving(bool device_streams, bool reduce_scatters_complete_at_once) {
  std::vector<torch::Tensor> tensors = {torch::ones({2}), torch::ones({3}), torch::ones({4})};
  NamedParameters parameters{{"a", "b", "c"}, tensors};
  std::vector<FlatGroup> groups = group_into_buckets(parameters.tensors, 1e-6, 1e-6, std::nullopt);
  attach_gradient_views(groups, parameters.tensors, 1);
  Slices shards(groups, parameters, 0, 1, /*own_storage=*/true);
  auto log = std::make_shared<std::vector<std::string>>();
  test::FakeCommunicator shard_group(reduce_scatters_complete_at_once, device_streams, log);
  test::FakeCommunicator replicas(/*complete_at_once=*/true, device_streams, log);
  SlicedGradients::Options options;
  options.job_ranks = 2;
  SlicedGradients gradients(groups, shards, shard_group, &replicas, options, [](const std::shared_ptr<Work>&, int64_t) {});
  for (size_t g = 0; g < groups.size(); ++g) {
    gradients.reduce(g);
    gradients.issued();
  }
  gradients.closed();
  return *log;
}

// NCCL (device streams): the same interleaving on every rank whatever completes when, each
// all-reduce across the replicas one group behind its reduce-scatter; with the all-reduces issued
// as each rank saw its reduce-scatter done, ranks would interleave differently and can deadlock.
TEST(HsdpReduction, DeviceStreamCommunicatorsInterleaveAlikeWhateverCompletesWhen) {
  const std::vector<std::string> expected = {"reduce-scatter of gradient bucket 0 (16 bytes)",
                                             "reduce-scatter of gradient bucket 1 (12 bytes)",
                                             "all-reduce across replicas of gradient bucket 0 (16 bytes)",
                                             "reduce-scatter of gradient bucket 2 (8 bytes)",
                                             "all-reduce across replicas of gradient bucket 1 (12 bytes)",
                                             "all-reduce across replicas of gradient bucket 2 (8 bytes)"};
  EXPECT_EQ(hsdp_interleaving(/*device_streams=*/true, /*complete_at_once=*/true), expected);
  EXPECT_EQ(hsdp_interleaving(/*device_streams=*/true, /*complete_at_once=*/false), expected);
}

// MPI (a thread per communicator, safe in any interleaving): each all-reduce as soon as its
// reduce-scatter is done, and every group's all the same.
TEST(HsdpReduction, HostCommunicatorsAllReduceEachGroupOnceItsReduceScatterIsDone) {
  const std::vector<std::string> at_once = hsdp_interleaving(false, true);
  EXPECT_EQ(at_once[1], "all-reduce across replicas of gradient bucket 0 (16 bytes)");
  const std::vector<std::string> later = hsdp_interleaving(false, false);
  EXPECT_EQ(later[3], "all-reduce across replicas of gradient bucket 0 (16 bytes)");
  EXPECT_EQ(at_once.size(), 6u);
  EXPECT_EQ(later.size(), 6u);
}

// hsdp's shard groups over the nodes, from the host each rank runs on.
std::string shard_group_problem(int given, const std::vector<std::string>& hosts) {
  try {
    plan_shard_groups(given, hosts);
    return "";
  } catch (const std::invalid_argument& problem) {
    return problem.what();
  }
}

TEST(HsdpShardGroups, ByDefaultANodesRanksOnEveryNodeAlike) {
  EXPECT_EQ(plan_shard_groups(0, {"a", "a", "b", "b"}).size, 2);
  EXPECT_FALSE(plan_shard_groups(0, {"a", "a", "b", "b"}).spans_nodes);
  EXPECT_EQ(plan_shard_groups(0, {"a", "a", "a"}).size, 3);
  // 2 ranks on one node and 4 on another: groups of 2 would split the second node's ranks.
  const std::string uneven = shard_group_problem(0, {"a", "a", "b", "b", "b", "b"});
  EXPECT_NE(uneven.find("the nodes run different numbers of ranks"), std::string::npos) << uneven;
  EXPECT_NE(uneven.find("give --shard-group-size"), std::string::npos) << uneven;
  EXPECT_NE(shard_group_problem(0, {"b", "b", "b", "b", "a", "a"}), "");
  EXPECT_NE(shard_group_problem(0, {"a", "b", "a", "b"}).find("not run their ranks in order"), std::string::npos);
}

TEST(HsdpShardGroups, AGivenSizeMayDivideOrSpanNodesButMustDivideTheRanks) {
  EXPECT_EQ(plan_shard_groups(2, {"a", "a", "b", "b", "b", "b"}).size, 2);
  EXPECT_FALSE(plan_shard_groups(2, {"a", "a", "b", "b", "b", "b"}).spans_nodes);
  EXPECT_TRUE(plan_shard_groups(3, {"a", "a", "b", "b", "b", "b"}).spans_nodes);
  EXPECT_EQ(shard_group_problem(4, {"a", "a", "b", "b", "b", "b"}), "4 does not divide the 6 ranks into shard groups");
}

}  // namespace
}  // namespace mpibert
