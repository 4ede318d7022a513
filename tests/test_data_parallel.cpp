// Run by ctest under `mpiexec -n 1|2|3`: DataParallel in process, on a tiny BERT, with the MPI
// communicator. Gradients come from a synthetic loss, sum(weight * parameter), so that every
// element's gradient is `weight`: rank r uses N * (r + 1), which DataParallel divides by N exactly,
// and the averaged gradient N (N + 1) / 2 is exact too. Results are compared for equality.
//
// Every rank runs every collective unconditionally (EXPECT, not ASSERT, between collectives), so a
// failed check on one rank does not leave the ranks out of step for the tests that follow.
#include <gtest/gtest.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "encoder_families.hpp"
#include "group_layout.hpp"
#include "mpibert/comm/communicator.hpp"
#include "mpibert/core/error.hpp"
#include "mpibert/model/bert_qa.hpp"
#include "mpibert/model/distilbert_qa.hpp"
#include "mpibert/model/model_registry.hpp"
#include "mpibert/parallel/data_parallel.hpp"
#include "mpibert/parallel/strategies.hpp"
#include "mpibert/runtime/host_collectives.hpp"
#include "named_parameters.hpp"
#include "rank_optimizer.hpp"
#include "slices.hpp"
#include "test_support.hpp"

namespace mpibert {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kNoClipping = 1e30;

// One layer, hidden 4, intermediate 8: 23 parameters whose sizes are easy to add up by hand.
BertConfig tiny_config() {
  BertConfig config;
  config.vocab_size = 30;
  config.hidden_size = 4;
  config.num_hidden_layers = 1;
  config.num_attention_heads = 1;
  config.intermediate_size = 8;
  config.max_position_embeddings = 16;
  config.hidden_dropout_prob = config.attention_probs_dropout_prob = 0;
  return config;
}

BertForQuestionAnswering make_model(const BertConfig& config, uint64_t seed) {
  torch::manual_seed(seed);
  BertForQuestionAnswering model(config);
  model->init_weights();
  return model;
}

// Backward of sum(weight * p) over the parameters not in `skipped`: each used gradient is `weight`.
void synthetic_backward(BertForQuestionAnswering& model, double weight, const std::set<std::string>& skipped = {}) {
  torch::Tensor loss = torch::zeros({});
  for (const auto& item : model->named_parameters())
    if (!skipped.count(item.key())) loss = loss + (item.value() * weight).sum();
  loss.backward();
}

// "fsdp_kept": fsdp with keep_gathered_for_backward (a name gtest takes as a parameter's).
DataParallelOptions options_for(const std::string& strategy, double first_bucket_bytes = 1 * kMiB,
                                double bucket_bytes = 25 * kMiB) {
  DataParallelOptions options;
  options.strategy = strategy == "fsdp_kept" ? "fsdp" : strategy;
  options.keep_gathered_for_backward = strategy == "fsdp_kept";
  options.first_bucket_mb = first_bucket_bytes / kMiB;
  options.bucket_mb = bucket_bytes / kMiB;
  return options;
}

std::unique_ptr<DataParallel> parallel_for(BertForQuestionAnswering& model, std::shared_ptr<Communicator> communicator,
                                           const AdamWOptions& adam, const DataParallelOptions& options) {
  return make_data_parallel(model_description(model), std::move(communicator), adam, options);
}

AdamWOptions adam_with_decay() {
  AdamWOptions adam;
  adam.weight_decay = 0.01;
  return adam;
}

// Equal on every rank: the maximum over ranks equals the minimum.
bool same_on_every_rank(const std::vector<double>& values, const std::string& what) {
  std::vector<double> negated;
  for (double value : values) negated.push_back(-value);
  const std::vector<double> highest = max_over_ranks(values, what), lowest = max_over_ranks(negated, what);
  for (size_t i = 0; i < values.size(); ++i)
    if (highest[i] != -lowest[i]) return false;
  return true;
}

std::vector<double> parameter_sums(BertForQuestionAnswering& model) {
  std::vector<double> sums;
  for (const auto& parameter : model->parameters()) sums.push_back(parameter.sum(torch::kDouble).item<double>());
  return sums;
}

class DataParallelTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    rank_ = world_rank();
    size_ = world_size();
    communicator_ = make_mpi_communicator(60);
  }

  // This rank's gradient weight and the average over ranks, both exact.
  double rank_weight() const { return static_cast<double>(size_) * (rank_ + 1); }
  double mean_weight() const { return size_ * (size_ + 1) / 2.0; }

  int rank_ = 0, size_ = 1;
  std::shared_ptr<Communicator> communicator_;
};

class DataParallelStrategies : public DataParallelTest {};

// Reverse registration order; the first bucket holds 40 bytes, the others 100; a bucket is never
// empty, so a parameter larger than the capacity has a bucket of its own. Sizes in float32 bytes.
TEST_F(DataParallelTest, BucketsCloseAtTheirCapacityInReverseRegistrationOrder) {
  BertForQuestionAnswering model = make_model(tiny_config(), 1);
  const auto parallel = parallel_for(model, communicator_, {}, options_for("ddp", 40, 100));
  const std::string layer = "bert.encoder.layer.0.";
  const std::vector<std::vector<std::string>> first_buckets = {
      {"qa_outputs.bias", "qa_outputs.weight"},  // 8 + 32 = 40: exactly the first bucket's capacity
      {layer + "output.LayerNorm.bias", layer + "output.LayerNorm.weight", layer + "output.dense.bias"},  // 48
      {layer + "output.dense.weight"},      // 128, over the capacity: alone
      {layer + "intermediate.dense.bias"},  // 32; the next one (128) would pass 100
      {layer + "intermediate.dense.weight"},
      {layer + "attention.output.LayerNorm.bias", layer + "attention.output.LayerNorm.weight",
       layer + "attention.output.dense.bias"},  // 48; with the dense weight (64) it would be 112
      {layer + "attention.output.dense.weight", layer + "attention.self.value.bias"},  // 80
  };
  const auto layout = parallel->bucket_layout();
  ASSERT_GE(layout.size(), first_buckets.size());
  for (size_t b = 0; b < first_buckets.size(); ++b) EXPECT_EQ(layout[b].parameters, first_buckets[b]) << "bucket " << b;

  // Every parameter in exactly one bucket, in reverse registration order overall.
  std::vector<std::string> flattened, reversed;
  for (const auto& bucket : layout) flattened.insert(flattened.end(), bucket.parameters.begin(), bucket.parameters.end());
  for (const auto& item : model->named_parameters()) reversed.insert(reversed.begin(), item.key());
  EXPECT_EQ(flattened, reversed);
}

// DDP's default: a 1 MiB first bucket, so the first reduction starts early in backward, then 25 MiB.
// The small model (17 MB of gradients) fits in two default buckets, so the rule for the later ones
// is checked with 4 MiB buckets.
TEST_F(DataParallelTest, TheFirstBucketIsSmall) {
  const DataParallelOptions defaults;
  EXPECT_EQ(defaults.first_bucket_mb, 1);
  EXPECT_EQ(defaults.bucket_mb, 25);
  BertForQuestionAnswering with_defaults = make_model(BertConfig::preset("small"), 1);
  // The word embedding (15.6 MB) is a group of its own, exchanged by rows (sparse, the default).
  const auto default_layout = parallel_for(with_defaults, communicator_, {}, defaults)->bucket_layout();
  ASSERT_EQ(default_layout.size(), 3u);
  EXPECT_EQ(default_layout.back().parameters, std::vector<std::string>{"bert.embeddings.word_embeddings.weight"});
  DataParallelOptions dense = defaults;
  dense.embedding_exchange = EmbeddingExchange::kDense;
  EXPECT_EQ(parallel_for(with_defaults, communicator_, {}, dense)->bucket_layout().size(), 2u);
  BertForQuestionAnswering model = make_model(BertConfig::preset("small"), 1);
  const auto parallel = parallel_for(model, communicator_, {}, options_for("ddp", 1 * kMiB, 4 * kMiB));
  std::map<std::string, int64_t> bytes;
  for (const auto& item : model->named_parameters()) bytes[item.key()] = static_cast<int64_t>(item.value().nbytes());
  auto bucket_bytes = [&](const BucketLayout& bucket) {
    int64_t total = 0;
    for (const auto& name : bucket.parameters) total += bytes[name];
    return total;
  };
  const auto layout = parallel->bucket_layout();
  ASSERT_GE(layout.size(), 3u);
  EXPECT_EQ(layout[0].parameters.front(), "qa_outputs.bias");
  EXPECT_LE(bucket_bytes(layout[0]), 1 * kMiB);
  EXPECT_GT(bucket_bytes(layout[0]) + bytes[layout[1].parameters.front()], 1 * kMiB) << "bucket 0 closed early";
  EXPECT_GT(bucket_bytes(layout[1]), 1 * kMiB) << "later buckets take more";
  for (size_t b = 1; b + 1 < layout.size(); ++b) {
    EXPECT_LE(bucket_bytes(layout[b]) - bytes[layout[b].parameters.back()], 4 * kMiB) << "bucket " << b;
    EXPECT_GT(bucket_bytes(layout[b]) + bytes[layout[b + 1].parameters.front()], 4 * kMiB) << "bucket " << b;
  }
}

// zero1 cuts every bucket into N equal slices: the bucket is padded to a multiple of N.
TEST_P(DataParallelStrategies, BucketsArePaddedToAMultipleOfTheRanks) {
  BertForQuestionAnswering model = make_model(tiny_config(), 1);
  const auto parallel = parallel_for(model, communicator_, {}, options_for(GetParam(), 40, 100));
  std::map<std::string, int64_t> numel;
  for (const auto& item : model->named_parameters()) numel[item.key()] = item.value().numel();
  for (const auto& bucket : parallel->bucket_layout()) {
    int64_t members = 0;
    for (const auto& name : bucket.parameters) members += numel[name];
    EXPECT_EQ(bucket.numel % size_, 0) << bucket.parameters.front();
    EXPECT_GE(bucket.numel, members);
    EXPECT_LT(bucket.numel - members, size_) << "padded by more than it needs";
  }
}

// zero1: the optimizer state of every parameter is cut into slices held by one rank each; taken
// over all ranks they cover each parameter exactly once, padding excluded.
TEST_P(DataParallelStrategies, OptimizerStateCoversEveryParameterOnce) {
  BertForQuestionAnswering model = make_model(tiny_config(), 1);
  const auto parallel = parallel_for(model, communicator_, {}, options_for(GetParam(), 40, 100));
  const bool sharded = GetParam() != "ddp";
  EXPECT_EQ(parallel->optimizer_state_is_sharded(), sharded);
  std::ostringstream names;
  for (const NamedTensor& tensor : parallel->optimizer_state())
    if (tensor.name.rfind("exp_avg.", 0) == 0) names << tensor.name.substr(8) << ' ' << tensor.tensor.numel() << '\n';
  const std::vector<std::string> every_rank = all_gather_strings(names.str());

  std::map<std::string, std::vector<std::pair<int64_t, int64_t>>> covered;  // parameter -> [begin, end) pieces
  for (int r = 0; r < size_; ++r) {
    std::istringstream lines(every_rank[static_cast<size_t>(r)]);
    std::string name;
    int64_t count = 0;
    while (lines >> name >> count) {
      const size_t bracket = name.find('[');
      EXPECT_EQ(bracket != std::string::npos, sharded) << name;
      if (!sharded) {  // every rank holds the whole state
        if (r == 0) covered[name].push_back({0, count});
        continue;
      }
      const size_t colon = name.find(':', bracket);
      const int64_t begin = std::stoll(name.substr(bracket + 1, colon - bracket - 1));
      const int64_t end = std::stoll(name.substr(colon + 1));
      EXPECT_EQ(end - begin, count) << name;
      covered[name.substr(0, bracket)].push_back({begin, end});
    }
  }
  for (const auto& item : model->named_parameters()) {
    auto pieces = covered[item.key()];
    std::sort(pieces.begin(), pieces.end());
    int64_t next = 0;
    for (const auto& [begin, end] : pieces) {
      EXPECT_EQ(begin, next) << item.key() << ": a gap or an overlap";
      next = end;
    }
    EXPECT_EQ(next, item.value().numel()) << item.key();
  }
}

TEST_P(DataParallelStrategies, EveryRankStartsFromRankZerosParameters) {
  BertForQuestionAnswering model = make_model(tiny_config(), 100 + static_cast<uint64_t>(rank_));
  const auto parallel = parallel_for(model, communicator_, {}, options_for(GetParam(), 40, 100));
  parallel->broadcast_parameters();
  EXPECT_TRUE(same_on_every_rank(parameter_sums(model), "parameter sums"));
  BertForQuestionAnswering rank_zero = make_model(tiny_config(), 100);
  for (size_t k = 0; k < model->parameters().size(); ++k)
    EXPECT_TRUE(torch::equal(model->parameters()[k], rank_zero->parameters()[k])) << "parameter " << k;
}

// One step on N ranks is one step of a single process on the averaged gradient, bit for bit:
// AdamW is elementwise, so slicing (zero1) changes nothing.
TEST_P(DataParallelStrategies, AStepEqualsOneProcessOnTheAveragedGradient) {
  BertForQuestionAnswering model = make_model(tiny_config(), 1), reference = make_model(tiny_config(), 1);
  const auto parallel = parallel_for(model, communicator_, adam_with_decay(), options_for(GetParam(), 40, 100));
  const auto single = parallel_for(reference, nullptr, adam_with_decay(), options_for(GetParam()));
  for (int step = 0; step < 3; ++step) {
    parallel->begin_backward(true);
    synthetic_backward(model, rank_weight());
    parallel->finish_gradient_sync();
    if (GetParam() == "ddp") {
      for (const auto& parameter : model->parameters())
        EXPECT_TRUE(torch::equal(parameter.grad(), torch::full_like(parameter, mean_weight()))) << "step " << step;
    }
    const double norm = parallel->clip_and_step(kNoClipping, 1e-2).item<double>();
    parallel->zero_grad();

    single->begin_backward(true);
    synthetic_backward(reference, mean_weight());
    single->finish_gradient_sync();
    const double reference_norm = single->clip_and_step(kNoClipping, 1e-2).item<double>();
    single->zero_grad();
    EXPECT_NEAR(norm, reference_norm, 1e-6 * reference_norm) << "step " << step;
  }
  for (size_t k = 0; k < model->parameters().size(); ++k)
    EXPECT_TRUE(torch::equal(model->parameters()[k], reference->parameters()[k])) << "parameter " << k;
}

// Clipping by the global norm: zero1's norm, summed from slices across ranks, scales as ddp's does.
TEST_P(DataParallelStrategies, ClippingUsesTheGlobalNorm) {
  BertForQuestionAnswering model = make_model(tiny_config(), 1), reference = make_model(tiny_config(), 1);
  const auto parallel = parallel_for(model, communicator_, {}, options_for(GetParam(), 40, 100));
  const auto single = parallel_for(reference, nullptr, {}, options_for(GetParam()));
  parallel->begin_backward(true);
  synthetic_backward(model, rank_weight());
  parallel->finish_gradient_sync();
  const double norm = parallel->clip_and_step(0.5, 1e-2).item<double>();
  single->begin_backward(true);
  synthetic_backward(reference, mean_weight());
  single->finish_gradient_sync();
  const double reference_norm = single->clip_and_step(0.5, 1e-2).item<double>();
  int64_t elements = 0;
  for (const auto& parameter : model->parameters()) elements += parameter.numel();
  EXPECT_NEAR(norm, mean_weight() * std::sqrt(static_cast<double>(elements)), 1e-5 * norm);
  EXPECT_NEAR(norm, reference_norm, 1e-6 * reference_norm);
  for (size_t k = 0; k < model->parameters().size(); ++k)
    EXPECT_TRUE(torch::allclose(model->parameters()[k], reference->parameters()[k], 1e-6, 1e-7)) << "parameter " << k;
}

// A parameter that took no part in a rank's backward never reports ready: its bucket is reduced
// after backward all the same, so every rank issues the same collectives and none waits forever.
TEST_P(DataParallelStrategies, ParametersWithoutGradientsAreReducedAfterBackward) {
  BertForQuestionAnswering model = make_model(tiny_config(), 1), reference = make_model(tiny_config(), 1);
  const auto parallel = parallel_for(model, communicator_, {}, options_for(GetParam(), 40, 100));
  const auto single = parallel_for(reference, nullptr, {}, options_for(GetParam()));
  const std::string unused_everywhere = "qa_outputs.bias", unused_on_rank_zero = "bert.embeddings.token_type_embeddings.weight";
  std::set<std::string> skipped = {unused_everywhere};
  if (rank_ == 0) skipped.insert(unused_on_rank_zero);
  parallel->begin_backward(true);
  synthetic_backward(model, rank_weight(), skipped);
  parallel->finish_gradient_sync();
  const auto named = model->named_parameters();
  if (GetParam() == "ddp") {
    EXPECT_TRUE(torch::equal(named[unused_everywhere].grad(), torch::zeros_like(named[unused_everywhere])));
    EXPECT_TRUE(torch::equal(named[unused_on_rank_zero].grad(),
                             torch::full_like(named[unused_on_rank_zero],
                                              mean_weight() - 1)));  // rank 0's N, over N ranks, missing
    EXPECT_TRUE(torch::equal(named["qa_outputs.weight"].grad(), torch::full_like(named["qa_outputs.weight"], mean_weight())));
  }
  // The step sees the same gradients as one process given them (the unused parameter's zero).
  parallel->clip_and_step(kNoClipping, 1e-2);
  single->begin_backward(true);
  torch::Tensor loss = torch::zeros({});
  for (const auto& item : reference->named_parameters()) {
    double weight = mean_weight();
    if (item.key() == unused_everywhere) weight = 0;
    if (item.key() == unused_on_rank_zero) weight -= 1;
    loss = loss + (item.value() * weight).sum();
  }
  loss.backward();
  single->finish_gradient_sync();
  single->clip_and_step(kNoClipping, 1e-2);
  for (const auto& item : model->named_parameters())
    EXPECT_TRUE(torch::equal(item.value(), reference->named_parameters()[item.key()])) << item.key();
}

// Gradient accumulation: micro-steps before the last one send nothing (DDP's no_sync) and keep
// the local sum; the last one reduces the accumulated gradients once.
TEST_P(DataParallelStrategies, AccumulationMicroStepsDoNotCommunicate) {
  BertForQuestionAnswering model = make_model(tiny_config(), 1);
  const auto parallel = parallel_for(model, communicator_, {}, options_for(GetParam(), 40, 100));
  const int64_t operations_before = communicator_->stats().operations;
  const int64_t bytes_before = parallel->sync_stats().bytes;

  parallel->begin_backward(false);
  synthetic_backward(model, rank_weight());
  parallel->finish_gradient_sync();  // nothing to wait for
  EXPECT_EQ(communicator_->stats().operations, operations_before);
  EXPECT_EQ(parallel->sync_stats().bytes, bytes_before);
  for (const auto& parameter : model->parameters())
    EXPECT_TRUE(torch::equal(parameter.grad(), torch::full_like(parameter, rank_weight()))) << "local sum";

  parallel->begin_backward(true);
  synthetic_backward(model, rank_weight());
  parallel->finish_gradient_sync();
  EXPECT_EQ(communicator_->stats().operations, operations_before + static_cast<int64_t>(parallel->num_buckets()));
  if (GetParam() == "ddp") {
    for (const auto& parameter : model->parameters())
      EXPECT_TRUE(torch::equal(parameter.grad(), torch::full_like(parameter, 2 * mean_weight()))) << "averaged once";
  }
}

// The sharded optimizer alone, against the plain one: each rank's slices of three parameters (one
// bucket, padded to the ranks), their gradients the slices of one whole gradient, one clip and
// AdamW step and the all-gather: every rank ends with the parameters and the norm that AdamW over
// the whole parameters gives, clipped or not.
TEST_F(DataParallelTest, ShardedOptimizerEqualsThePlainOneOverTheWhole) {
  for (const double max_norm : {kNoClipping, 0.5}) {
    torch::manual_seed(3);
    const std::vector<torch::Tensor> initial = {torch::randn({5}), torch::randn({7}), torch::randn({2, 3})};
    const std::vector<torch::Tensor> gradient = {torch::randn({5}), torch::randn({7}), torch::randn({2, 3})};
    auto copies = [&] {
      NamedParameters named;
      for (size_t k = 0; k < initial.size(); ++k) {
        named.names.push_back(k == 1 ? "b.bias" : "p" + std::to_string(k));  // b.bias: no weight decay
        named.tensors.push_back(initial[k].clone().requires_grad_());
      }
      return named;
    };
    NamedParameters plain = copies();
    for (size_t k = 0; k < plain.tensors.size(); ++k) plain.tensors[k].mutable_grad() = gradient[k].clone();
    RankOptimizer whole(whole_parameters(plain), adam_with_decay());
    const torch::Tensor whole_norm = whole.clip_and_step(max_norm, 0.01);

    NamedParameters sharded = copies();
    std::vector<FlatGroup> groups = group_into_buckets(sharded.tensors, 1.0, 1.0, std::nullopt);
    ASSERT_EQ(groups.size(), 1u);
    attach_gradient_views(groups, sharded.tensors, size_);
    for (size_t k = 0; k < sharded.tensors.size(); ++k) sharded.tensors[k].grad().copy_(gradient[k]);
    Slices slices(groups, sharded, rank_, size_, /*own_storage=*/false);
    const int64_t slice = groups[0].slice_numel(size_);
    slices[0].grad_slice.copy_(groups[0].grads.narrow(0, slice * rank_, slice));
    RankOptimizer of_slices(slices.pieces(), sharded.tensors.size(), *communicator_, torch::kCPU, adam_with_decay());
    const torch::Tensor sharded_norm = of_slices.clip_and_step(max_norm, 0.01);
    slices.all_gather_parameters(*communicator_);

    EXPECT_NEAR(sharded_norm.item<double>(), whole_norm.item<double>(), 1e-6 * whole_norm.item<double>());
    for (size_t k = 0; k < plain.tensors.size(); ++k)
      EXPECT_TRUE(torch::allclose(sharded.tensors[k], plain.tensors[k], 1e-6, 1e-7)) << sharded.names[k] << " " << max_norm;
  }
}

// A model of one unit with one parameter of one element: sharded over N ranks, its group is padded
// to N elements and every rank but rank 0 holds only padding, so no slice, no AdamW slot and no
// gradient (small models on many ranks). Its forward calls the unit hooks, as BERT's does.
class OneElementModel {
 public:
  OneElementModel() {
    description_.parameters = {{"unit.weight", weight_}};
    description_.unit_prefixes = {"unit."};
    description_.set_unit_hooks = [this](UnitHooks* hooks) { hooks_ = hooks; };
  }
  const ModelDescription& description() const { return description_; }
  torch::Tensor forward(const torch::Tensor& x) {
    if (hooks_) hooks_->before_unit(0);
    torch::Tensor y = weight_ * x;
    if (hooks_) hooks_->after_unit(0, y);
    return y;
  }

 private:
  torch::Tensor weight_ = torch::full({1}, 2.0f).requires_grad_();
  ModelDescription description_;
  UnitHooks* hooks_ = nullptr;
};

// A rank whose slices are all padding takes part in every step like the others: clipping, AdamW,
// fp16's unscaling and its skip decision (which it shares, though it holds no gradient to check),
// and its optimizer state and memory are those of nothing.
class SlicelessRank : public DataParallelTest {};

TEST_P(SlicelessRank, TakesPartInEveryStep) {
  OneElementModel model;
  const auto parallel = make_data_parallel(model.description(), communicator_, adam_with_decay(), options_for(GetParam()));
  auto step = [&](float input) {
    parallel->begin_backward(true);
    model.forward(torch::full({1}, input)).sum().backward();
    parallel->finish_gradient_sync();
    const bool skip = parallel->unscale_gradients(0.5);
    torch::Tensor norm;
    if (!skip) norm = parallel->clip_and_step(kNoClipping, 0.1);
    parallel->zero_grad();
    return std::make_pair(skip, norm);
  };
  parallel->broadcast_parameters();
  const auto [skipped, norm] = step(rank_ == 0 ? 3.0f : 1.0f);
  EXPECT_FALSE(skipped);
  // Rank 0 holds the one element, the others nothing: the averaged gradient (3 + (N - 1)) / N, halved.
  const double gradient = (3.0 + (size_ - 1)) / size_ * 0.5;
  EXPECT_NEAR(norm.item<double>(), gradient, 1e-6);
  EXPECT_EQ(parallel->held_gradients().size(), size_ == 1 || rank_ == 0 ? 1u : 0u);
  EXPECT_EQ(parallel->optimizer_state().size(), size_ == 1 || rank_ == 0 ? 3u : 1u);  // moments, and adam_steps
  // A non-finite gradient on rank 0 alone: every rank skips, the one that holds nothing too.
  const auto [skipped_inf, no_norm] = step(rank_ == 0 ? std::numeric_limits<float>::infinity() : 1.0f);
  EXPECT_TRUE(skipped_inf);
}

std::string strategy_test_name(const ::testing::TestParamInfo<std::string>& info) { return info.param; }

// The strategies the parameterized tests run, from the table (a new row joins them), plus `more`
// (variants of a row: "fsdp_kept"). What each kind of test leaves out, it says by the row's traits.
std::vector<std::string> strategies_where(const std::function<bool(const StrategyRow&)>& keep,
                                          const std::vector<std::string>& more = {}) {
  std::vector<std::string> names;
  for (const StrategyRow& row : strategy_table())
    if (keep(row)) names.push_back(row.name);
  names.insert(names.end(), more.begin(), more.end());
  return names;
}
bool holds_whole_parameters(const StrategyRow& row) { return row.parameters == "whole"; }
bool shards_the_optimizer(const StrategyRow& row) { return row.optimizer_state != "whole"; }
// hsdp's shard groups need ranks in groups: its tests are the Hsdp* ones (ctest data_parallel.hsdp_ranks4).
bool over_every_rank(const StrategyRow& row) {
  return std::find(row.reads.begin(), row.reads.end(), "shard_group_size") == row.reads.end();
}

// The tests above drive backward on the parameters directly, outside any forward: fsdp's parameters
// exist whole only inside their unit's forward and backward, so its tests below go through forward.
INSTANTIATE_TEST_SUITE_P(Strategies, DataParallelStrategies, ::testing::ValuesIn(strategies_where(holds_whole_parameters)),
                         strategy_test_name);
INSTANTIATE_TEST_SUITE_P(Strategies, SlicelessRank, ::testing::ValuesIn(strategies_where([](const StrategyRow& row) {
                           return shards_the_optimizer(row) && over_every_rank(row);
                         })),
                         strategy_test_name);

// A forward and backward of the QA loss on `ids` ([batch, seq]), positions seeded by rank and step.
void qa_backward_on(BertForQuestionAnswering& model, const torch::Tensor& ids, int rank, int step) {
  torch::manual_seed(static_cast<uint64_t>(1000 + 10 * rank + step));
  const int64_t batch = ids.size(0), seq = ids.size(1);
  const torch::Tensor types = torch::zeros({batch, seq}, torch::kLong), mask = torch::ones({batch, seq}, torch::kLong);
  const torch::Tensor starts = torch::randint(0, seq, {batch}, torch::kLong),
                      ends = torch::randint(0, seq, {batch}, torch::kLong);
  model->forward(ids, types, mask, starts, ends).loss.backward();
}

// The same on this rank's own random batch (seeded by rank and step).
void qa_backward(BertForQuestionAnswering& model, int rank, int step) {
  torch::manual_seed(static_cast<uint64_t>(2000 + 10 * rank + step));
  qa_backward_on(model, torch::randint(1, model->config().vocab_size, {2, 6}, torch::kLong), rank, step);
}

// Every rank's whole parameters (gathered for fsdp), in registration order.
std::vector<torch::Tensor> whole_parameters(BertForQuestionAnswering& model, DataParallel& parallel) {
  const WholeParameters whole(parallel);
  std::vector<torch::Tensor> copies;
  for (const auto& parameter : model->parameters()) copies.push_back(parameter.detach().clone());
  return copies;
}

class ThroughForward : public DataParallelTest {};

// Three steps of the real model, with accumulation over two micro-batches and clipping by the global
// norm. zero2 ends bit for bit where zero1 does (the same buckets, collectives and arithmetic);
// zero1 and fsdp end where ddp does within round-off (the norm is summed from slices in float64;
// fsdp's units are reduced per micro-batch, in other groups), the parameters whose true gradient is
// zero left out (test::has_zero_true_gradient).
// Three steps of two micro-batches each, clipping at 0.5, lr 1e-2.
void three_accumulated_steps(BertForQuestionAnswering& model, DataParallel& parallel, int rank) {
  for (int step = 0; step < 3; ++step) {
    for (int micro = 0; micro < 2; ++micro) {
      parallel.begin_backward(micro == 1);
      qa_backward(model, rank, 2 * step + micro);
    }
    parallel.finish_gradient_sync();
    parallel.clip_and_step(0.5, 1e-2);
    parallel.zero_grad();
  }
}

TEST_P(ThroughForward, EveryStrategyEndsWhereDdpEnds) {
  std::map<std::string, std::vector<torch::Tensor>> results;
  for (const std::string& strategy : {std::string("ddp"), std::string("zero1"), GetParam()}) {
    if (results.count(strategy)) continue;
    BertForQuestionAnswering model = make_model(tiny_config(), 1);
    const auto parallel = parallel_for(model, communicator_, adam_with_decay(), options_for(strategy, 40, 100));
    parallel->broadcast_parameters();
    three_accumulated_steps(model, *parallel, rank_);
    results[strategy] = whole_parameters(model, *parallel);
  }
  const auto names = make_model(tiny_config(), 1)->named_parameters().keys();
  const auto& mine = results[GetParam()];
  for (size_t k = 0; k < mine.size(); ++k) {
    if (GetParam() == "zero2") {
      EXPECT_TRUE(torch::equal(mine[k], results["zero1"][k])) << names[k];
    }
    if (test::has_zero_true_gradient(names[k], tiny_config().num_hidden_layers)) continue;
    EXPECT_TRUE(torch::allclose(mine[k], results["ddp"][k], 1e-4, 1e-5)) << names[k];
  }
}

INSTANTIATE_TEST_SUITE_P(
    Strategies, ThroughForward,
    ::testing::ValuesIn(strategies_where([](const StrategyRow& row) { return shards_the_optimizer(row) && over_every_rank(row); },
                                         {"fsdp_kept"})),
    strategy_test_name);

// DistilBERT through the strategies, which know it by its description alone (its units: the
// embeddings, each block, the QA head; its word embedding for ddp's sparse exchange): three
// accumulated steps of each end where ddp's do, as BERT's above, and ddp's sparse exchange where
// the dense one does.
class DistilBertStrategies : public DataParallelTest {};

TEST_P(DistilBertStrategies, EndWhereDdpEnds) {
  DistilBertConfig config;
  config.vocab_size = 30;
  config.dim = 4;
  config.n_layers = 2;
  config.n_heads = 1;
  config.hidden_dim = 8;
  config.max_position_embeddings = 16;
  config.dropout = config.attention_dropout = config.qa_dropout = 0;
  auto run = [&](const std::string& strategy, EmbeddingExchange exchange) {
    torch::manual_seed(1);
    DistilBertForQuestionAnswering model(config);
    DataParallelOptions options = options_for(strategy, 40, 100);
    options.embedding_exchange = exchange;
    const auto parallel = make_data_parallel(model->description(), communicator_, adam_with_decay(), options);
    parallel->broadcast_parameters();
    for (int step = 0; step < 3; ++step) {
      for (int micro = 0; micro < 2; ++micro) {
        torch::manual_seed(static_cast<uint64_t>(3000 + 10 * rank_ + 2 * step + micro));
        const torch::Tensor ids = torch::randint(1, config.vocab_size, {2, 6}, torch::kLong);
        parallel->note_input_ids(ids);
        parallel->begin_backward(micro == 1);
        model
            ->forward(ids, torch::zeros_like(ids), torch::ones_like(ids), torch::randint(0, 6, {2}, torch::kLong),
                      torch::randint(0, 6, {2}, torch::kLong))
            .loss.backward();
      }
      parallel->finish_gradient_sync();
      parallel->clip_and_step(0.5, 1e-2);
      parallel->zero_grad();
    }
    const WholeParameters whole(*parallel);
    std::vector<torch::Tensor> copies;
    for (const auto& parameter : model->parameters()) copies.push_back(parameter.detach().clone());
    return copies;
  };
  const auto ddp = run("ddp", EmbeddingExchange::kDense), mine = run(GetParam(), EmbeddingExchange::kSparse);
  const auto names = DistilBertForQuestionAnswering(config)->named_parameters().keys();
  for (size_t k = 0; k < mine.size(); ++k) {
    if (test::has_zero_true_gradient(names[k], config.n_layers)) continue;
    EXPECT_TRUE(torch::allclose(mine[k], ddp[k], 1e-4, 1e-5)) << names[k];
  }
}

INSTANTIATE_TEST_SUITE_P(Strategies, DistilBertStrategies,
                         ::testing::ValuesIn(strategies_where([](const StrategyRow&) { return true; })), strategy_test_name);

// Every family of tests/encoder_families.hpp through every strategy, as DistilBERT's above: three
// accumulated steps of each, with and without activation checkpointing, end where dense ddp's do
// (the families' own units: ELECTRA's projection, DeBERTa's relative embeddings that every layer
// takes, ModernBERT's final norm and head transform).
class FamilyStrategies : public ::testing::TestWithParam<std::tuple<test::EncoderFamily, std::string>> {
 protected:
  void SetUp() override {
    rank_ = world_rank();
    communicator_ = make_mpi_communicator(60);
  }
  int rank_ = 0;
  std::shared_ptr<Communicator> communicator_;
};

TEST_P(FamilyStrategies, EndWhereDenseDdpEnds) {
  const auto& [family, strategy] = GetParam();
  const nlohmann::json config = family.config(0.0);
  const int64_t vocab = config["vocab_size"];
  auto run = [&](const std::string& name, EmbeddingExchange exchange, bool checkpointing) {
    torch::manual_seed(1);
    ModelOptions model_options;
    model_options.gradient_checkpointing = checkpointing;
    QAModelPtr model = make_qa_model(config, family.file("config.json"), model_options);
    DataParallelOptions options = options_for(name, 4096, 16384);
    options.embedding_exchange = exchange;
    const auto parallel = make_data_parallel(model->description(), communicator_, adam_with_decay(), options);
    parallel->broadcast_parameters();
    for (int step = 0; step < 3; ++step) {
      for (int micro = 0; micro < 2; ++micro) {
        torch::manual_seed(static_cast<uint64_t>(3000 + 10 * rank_ + 2 * step + micro));
        const torch::Tensor ids = torch::randint(5, vocab, {2, 6}, torch::kLong);
        parallel->note_input_ids(ids);
        parallel->begin_backward(micro == 1);
        model
            ->forward(ids, torch::zeros_like(ids), torch::ones_like(ids), torch::randint(0, 6, {2}, torch::kLong),
                      torch::randint(0, 6, {2}, torch::kLong))
            .loss.backward();
      }
      parallel->finish_gradient_sync();
      parallel->clip_and_step(0.5, 1e-2);
      parallel->zero_grad();
    }
    const WholeParameters whole(*parallel);
    std::vector<std::pair<std::string, torch::Tensor>> copies;
    for (const auto& item : model->module().named_parameters()) copies.emplace_back(item.key(), item.value().detach().clone());
    return copies;
  };
  const auto ddp = run("ddp", EmbeddingExchange::kDense, false);
  const int64_t layers = config.value("num_hidden_layers", int64_t{0});
  for (const bool checkpointing : {false, true}) {
    const auto mine = run(strategy, EmbeddingExchange::kSparse, checkpointing);
    for (size_t k = 0; k < mine.size(); ++k) {
      if (test::has_zero_true_gradient(mine[k].first, layers)) continue;
      EXPECT_TRUE(torch::allclose(mine[k].second, ddp[k].second, 1e-4, 1e-5))
          << mine[k].first << (checkpointing ? " checkpointed" : "");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Strategies, FamilyStrategies,
                         ::testing::Combine(::testing::ValuesIn(test::encoder_families()),
                                            ::testing::ValuesIn(strategies_where([](const StrategyRow&) { return true; }))),
                         [](const auto& info) {
                           return test::test_name_of(std::get<0>(info.param).fixture) + "_" + std::get<1>(info.param);
                         });

// hsdp over groups of G consecutive ranks (every G that divides the ranks): three accumulated steps
// end where ddp's end within the sharded strategies' round-off, each rank holds 1/G of the AdamW
// state, and the replicas of a slice (ranks G apart) hold the same bytes. With G the whole job
// there are no replicas: fsdp's composition over the same group, bit for bit. Kept for backward,
// each ends bit for bit where it ends without.
TEST_F(DataParallelTest, HsdpShardsInsideItsGroupsAndEndsWhereDdpEnds) {
  auto run = [&](const std::string& strategy, int group, int64_t* state_bytes, bool keep = false) {
    BertForQuestionAnswering model = make_model(tiny_config(), 1);
    DataParallelOptions options = options_for(strategy, 40, 100);
    options.shard_group_size = group;
    options.keep_gathered_for_backward = keep;
    const auto parallel = parallel_for(model, communicator_, adam_with_decay(), options);
    parallel->broadcast_parameters();
    three_accumulated_steps(model, *parallel, rank_);
    if (state_bytes) *state_bytes = parallel->optimizer_state_bytes();
    return whole_parameters(model, *parallel);
  };
  int64_t whole_state = 0;
  const auto ddp = run("ddp", 0, &whole_state);
  const auto fsdp = run("fsdp", 0, nullptr);
  const auto names = make_model(tiny_config(), 1)->named_parameters().keys();
  for (int group = 1; group <= size_; ++group) {
    if (size_ % group != 0) continue;
    SCOPED_TRACE("shard groups of " + std::to_string(group));
    int64_t state = 0;
    const auto hsdp = run("hsdp", group, &state);
    const auto kept = run("hsdp", group, nullptr, /*keep=*/true);
    // 1/G of the state, up to the padding of each unit to a multiple of G.
    EXPECT_NEAR(static_cast<double>(state), static_cast<double>(whole_state) / group, 64.0 * 2 * 4 * group);
    for (size_t k = 0; k < hsdp.size(); ++k) {
      EXPECT_TRUE(torch::equal(kept[k], hsdp[k])) << names[k];
      if (group == size_) {
        EXPECT_TRUE(torch::equal(hsdp[k], fsdp[k])) << names[k];
      }
      if (test::has_zero_true_gradient(names[k], tiny_config().num_hidden_layers)) continue;
      EXPECT_TRUE(torch::allclose(hsdp[k], ddp[k], 1e-4, 1e-5)) << names[k];
    }
  }
}

// The replicas of a slice (ranks G apart) hold the same bytes after steps: the gradients they
// updated from and their AdamW state. G = 2 on 4 ranks (ctest data_parallel.hsdp_ranks4), else 1
// (every rank a group of its own, all of them replicas).
TEST_F(DataParallelTest, HsdpReplicasHoldTheSameSlices) {
  const int group = size_ >= 4 && size_ % 2 == 0 ? 2 : 1;
  BertForQuestionAnswering model = make_model(tiny_config(), 1);
  DataParallelOptions options = options_for("hsdp", 40, 100);
  options.shard_group_size = group;
  const auto parallel = parallel_for(model, communicator_, adam_with_decay(), options);
  parallel->broadcast_parameters();
  three_accumulated_steps(model, *parallel, rank_);
  std::vector<double> sums;
  for (const auto& gradient : parallel->held_gradients()) sums.push_back(gradient.sum(torch::kDouble).item<double>());
  sums.push_back(static_cast<double>(parallel->optimizer_state_bytes()));
  // Every rank's sums, each in its own block of a vector the max over ranks gathers.
  constexpr size_t kBlock = 64;
  ASSERT_LE(sums.size(), kBlock);
  std::vector<double> spread(kBlock * static_cast<size_t>(size_), -1e300);
  std::copy(sums.begin(), sums.end(), spread.begin() + static_cast<std::ptrdiff_t>(kBlock * static_cast<size_t>(rank_)));
  const std::vector<double> all = max_over_ranks(spread, "the ranks' slice sums");
  const size_t replica = static_cast<size_t>((rank_ + group) % size_);
  for (size_t i = 0; i < kBlock; ++i)
    EXPECT_EQ(all[kBlock * static_cast<size_t>(rank_) + i], all[kBlock * replica + i]) << "sum " << i << " of rank " << rank_;
}

// Activation checkpointing (ModelOptions::gradient_checkpointing) changes no strategy's result: with
// dropout on, three steps with accumulation end bit for bit where the same strategy ends without it,
// with the same collectives (each parameter's gradient hook fires once per backward in the
// recompute's nested backward; fsdp recomputes a layer after its backward's gather).
class WithCheckpointing : public DataParallelTest {};

TEST_P(WithCheckpointing, EndsBitForBitWhereTheRunWithoutEnds) {
  BertConfig config = tiny_config();
  config.num_hidden_layers = 2;
  config.hidden_dropout_prob = config.attention_probs_dropout_prob = 0.1;
  auto train = [&](bool checkpointing, int64_t& operations) {
    ModelOptions model_options;
    model_options.gradient_checkpointing = checkpointing;
    torch::manual_seed(1);
    BertForQuestionAnswering model(config, model_options);
    const auto parallel = parallel_for(model, communicator_, adam_with_decay(), options_for(GetParam(), 40, 100));
    parallel->broadcast_parameters();
    const int64_t before = communicator_->stats().operations;
    three_accumulated_steps(model, *parallel, rank_);
    operations = communicator_->stats().operations - before;
    return whole_parameters(model, *parallel);
  };
  int64_t plain_operations = 0, checkpointed_operations = 0;
  const auto plain = train(false, plain_operations), checkpointed = train(true, checkpointed_operations);
  EXPECT_EQ(checkpointed_operations, plain_operations);
  const auto names = make_model(config, 1)->named_parameters().keys();
  for (size_t k = 0; k < plain.size(); ++k) EXPECT_TRUE(torch::equal(checkpointed[k], plain[k])) << names[k];
}

INSTANTIATE_TEST_SUITE_P(Strategies, WithCheckpointing, ::testing::ValuesIn(strategies_where(over_every_rank, {"fsdp_kept"})),
                         strategy_test_name);

// ddp's sparse embedding exchange. Each rank's ids come from its own few rows (shifted each
// micro-batch), so the ranks touch different, overlapping rows: the union, not any rank's own.
class SparseEmbedding : public DataParallelTest {
 protected:
  torch::Tensor ids_for(int step, int micro) const {
    torch::manual_seed(static_cast<uint64_t>(3000 + 10 * rank_ + 2 * step + micro));
    const int64_t low = 1 + 2 * rank_ + micro;
    return torch::randint(low, low + 3, {2, 6}, torch::kLong);
  }
  // Two steps of two micro-batches each (the first one's ids noted without synchronizing).
  void train(BertForQuestionAnswering& model, DataParallel& parallel) {
    touched.clear();
    for (int step = 0; step < 2; ++step) {
      touched.emplace_back(static_cast<size_t>(model->config().vocab_size), 0.0);
      for (int micro = 0; micro < 2; ++micro) {
        const torch::Tensor ids = ids_for(step, micro);
        for (int64_t id : std::vector<int64_t>(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + ids.numel()))
          touched.back()[static_cast<size_t>(id)] = 1;
        parallel.note_input_ids(ids);
        parallel.begin_backward(micro == 1);
        qa_backward_on(model, ids, rank_, 2 * step + micro);
      }
      parallel.finish_gradient_sync();
      gradients.push_back({});
      for (const auto& parameter : model->parameters()) gradients.back().push_back(parameter.grad().clone());
      parallel.clip_and_step(0.5, 1e-2);
      parallel.zero_grad();
    }
  }
  // The number of rows any rank touched in the step.
  int64_t union_rows(int step) const {
    const std::vector<double> any_rank = max_over_ranks(touched[static_cast<size_t>(step)], "the rows touched");
    return static_cast<int64_t>(std::accumulate(any_rank.begin(), any_rank.end(), 0.0));
  }
  std::vector<std::vector<torch::Tensor>> gradients;  // per step, per parameter, after synchronization
  std::vector<std::vector<double>> touched;           // per step: 1 for the rows this rank's ids touched
};

// The gradients after synchronization are the dense all-reduce's (bit for bit on 2 ranks: both add
// the same two halves; within round-off on 3, summed in another order), rows no rank touched
// included (zero), and only the union of the touched rows was sent.
TEST_F(SparseEmbedding, GivesTheDenseGradientsSendingTheTouchedRowsOnly) {
  DataParallelOptions sparse_options = options_for("ddp", 40, 100), dense_options = sparse_options;
  dense_options.embedding_exchange = EmbeddingExchange::kDense;
  BertForQuestionAnswering dense_model = make_model(tiny_config(), 1);
  const auto dense = parallel_for(dense_model, communicator_, adam_with_decay(), dense_options);
  train(dense_model, *dense);
  const auto dense_gradients = std::move(gradients);
  gradients.clear();

  BertForQuestionAnswering model = make_model(tiny_config(), 1);
  const auto parallel = parallel_for(model, communicator_, adam_with_decay(), sparse_options);
  EXPECT_EQ(parallel->embedding_exchange(), EmbeddingExchange::kSparse);
  EXPECT_EQ(dense->embedding_exchange(), EmbeddingExchange::kDense);
  train(model, *parallel);

  const auto names = model->named_parameters().keys();
  for (size_t step = 0; step < gradients.size(); ++step)
    for (size_t k = 0; k < names.size(); ++k) {
      if (size_ <= 2) {
        EXPECT_TRUE(torch::equal(gradients[step][k], dense_gradients[step][k])) << names[k] << ", step " << step;
      }
      EXPECT_TRUE(torch::allclose(gradients[step][k], dense_gradients[step][k], 1e-6, 1e-8)) << names[k] << ", step " << step;
    }
  for (size_t k = 0; k < names.size(); ++k)
    EXPECT_TRUE(torch::allclose(model->parameters()[k], dense_model->parameters()[k], 1e-6, 1e-7)) << names[k];

  // Both steps went sparse, each sending the union of the rows any rank touched in either micro-batch.
  const int64_t rows = union_rows(0) + union_rows(1);
  const SyncStats stats = parallel->sync_stats(), dense_stats = dense->sync_stats();
  EXPECT_EQ(stats.sparse_exchanges, 2);
  EXPECT_EQ(stats.dense_fallbacks, 0);
  EXPECT_EQ(stats.embedding_rows, rows);
  const int64_t hidden = tiny_config().hidden_size, vocab = tiny_config().vocab_size;
  const int64_t embedding_bytes = (vocab * hidden + size_ - 1) / size_ * size_ * 4;
  EXPECT_EQ(dense_stats.bytes - stats.bytes, 2 * embedding_bytes - rows * hidden * 4 - 2 * vocab * 4)
      << "per step: the dense embedding, less the union's rows and the mask of touched rows";
}

TEST_F(SparseEmbedding, ExchangeNames) {
  EXPECT_STREQ(embedding_exchange_name(EmbeddingExchange::kSparse), "sparse");
  EXPECT_STREQ(embedding_exchange_name(EmbeddingExchange::kDense), "dense");
}

// A union past sparse_rows_max_fraction of the vocabulary is all-reduced whole, on every rank.
TEST_F(SparseEmbedding, ALargeUnionGoesDense) {
  DataParallelOptions options = options_for("ddp", 40, 100), dense_options = options;
  options.sparse_rows_max_fraction = 2.5 / tiny_config().vocab_size;  // each rank alone touches 3 rows or more
  dense_options.embedding_exchange = EmbeddingExchange::kDense;
  BertForQuestionAnswering dense_model = make_model(tiny_config(), 1), model = make_model(tiny_config(), 1);
  const auto dense = parallel_for(dense_model, communicator_, {}, dense_options);
  const auto parallel = parallel_for(model, communicator_, {}, options);
  train(dense_model, *dense);
  const auto dense_gradients = std::move(gradients);
  gradients.clear();
  train(model, *parallel);
  for (size_t step = 0; step < gradients.size(); ++step)
    for (size_t k = 0; k < gradients[step].size(); ++k) EXPECT_TRUE(torch::equal(gradients[step][k], dense_gradients[step][k]));
  EXPECT_EQ(parallel->sync_stats().dense_fallbacks, 2);
  EXPECT_EQ(parallel->sync_stats().sparse_exchanges, 0);
}

// fsdp holds 1/N of each unit between steps: no unit stays whole after forward and backward, every
// micro-batch communicates (a gather per unit in forward and in backward but the last unit's, a
// reduce-scatter per unit), and the parameters are whole only while WholeParameters holds them.
TEST_F(DataParallelTest, FsdpHoldsItsSlicesOnlyAndGathersEveryMicroBatch) {
  BertForQuestionAnswering model = make_model(tiny_config(), 1);
  const auto parallel = parallel_for(model, communicator_, {}, options_for("fsdp"));
  parallel->broadcast_parameters();
  const auto units = parallel->bucket_layout();
  EXPECT_EQ(units.size(), static_cast<size_t>(tiny_config().num_hidden_layers + 2));  // embeddings, layers, QA head
  int64_t padded = 0;
  for (const auto& unit : units) padded += unit.numel;
  const int64_t slice_bytes = padded / size_ * 4;
  EXPECT_EQ(parallel->memory_footprint().parameters, slice_bytes);
  const int64_t operations = communicator_->stats().operations;
  for (int micro = 0; micro < 2; ++micro) {
    parallel->begin_backward(/*synchronize=*/micro == 1);  // ignored: fsdp reduces every micro-batch
    qa_backward(model, rank_, micro);
  }
  parallel->finish_gradient_sync();
  const auto per_micro_batch = static_cast<int64_t>(units.size() * 3 - 1);
  EXPECT_EQ(communicator_->stats().operations - operations, 2 * per_micro_batch);
  EXPECT_EQ(parallel->memory_footprint().parameters, slice_bytes);
  EXPECT_EQ(parallel->memory_footprint().gradients, slice_bytes);
  {
    const WholeParameters whole(*parallel);
    EXPECT_EQ(parallel->memory_footprint().parameters, slice_bytes + padded * 4);
    EXPECT_TRUE(same_on_every_rank(parameter_sums(model), "parameter sums"));
  }
  EXPECT_EQ(parallel->memory_footprint().parameters, slice_bytes);
}

// Kept for backward (FSDP2's reshard_after_forward=False), every unit is gathered once per
// micro-batch, in forward, and held whole until its backward is done: backward's gathers send
// nothing. The values are the same gathered weights, so the steps end bit for bit where fsdp's do.
TEST_F(DataParallelTest, FsdpKeptForBackwardGathersEachUnitOncePerMicroBatch) {
  std::map<bool, std::vector<torch::Tensor>> ends;
  std::map<bool, int64_t> operations;
  int64_t units = 0;
  for (const bool keep : {false, true}) {
    BertForQuestionAnswering model = make_model(tiny_config(), 1);
    const auto parallel = parallel_for(model, communicator_, adam_with_decay(), options_for(keep ? "fsdp_kept" : "fsdp"));
    parallel->broadcast_parameters();
    units = static_cast<int64_t>(parallel->bucket_layout().size());
    const int64_t before = communicator_->stats().operations;
    three_accumulated_steps(model, *parallel, rank_);
    operations[keep] = communicator_->stats().operations - before;
    ends[keep] = whole_parameters(model, *parallel);
  }
  EXPECT_EQ(operations[false] - operations[true], 6 * (units - 1));  // 3 steps of 2 micro-batches
  for (size_t k = 0; k < ends[false].size(); ++k) EXPECT_TRUE(torch::equal(ends[true][k], ends[false][k])) << k;
}

// Between forward and backward a kept rank holds every unit whole; after backward only its slices.
TEST_F(DataParallelTest, FsdpKeptForBackwardHoldsTheWholeModelUntilBackward) {
  BertForQuestionAnswering model = make_model(tiny_config(), 1);
  const auto parallel = parallel_for(model, communicator_, {}, options_for("fsdp_kept"));
  parallel->broadcast_parameters();
  int64_t padded = 0;
  for (const auto& unit : parallel->bucket_layout()) padded += unit.numel;
  const int64_t slice_bytes = padded / size_ * 4;
  parallel->begin_backward(/*synchronize=*/true);
  const int64_t batch = 2, seq = 6;
  const torch::Tensor ids = torch::randint(1, tiny_config().vocab_size, {batch, seq}, torch::kLong),
                      positions = torch::zeros({batch}, torch::kLong);
  const auto output = model->forward(ids, torch::zeros({batch, seq}, torch::kLong), torch::ones({batch, seq}, torch::kLong),
                                     positions, positions);
  EXPECT_EQ(parallel->memory_footprint().parameters, slice_bytes + padded * 4);
  output.loss.backward();
  parallel->finish_gradient_sync();
  EXPECT_EQ(parallel->memory_footprint().parameters, slice_bytes);
}

// Calls a function before a parameter's gradient is accumulated.
class BeforeAccumulation : public torch::autograd::FunctionPreHook {
 public:
  explicit BeforeAccumulation(std::function<void()> call) : call_(std::move(call)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& grads) override {
    call_();
    return grads;
  }

 private:
  std::function<void()> call_;
};

// zero2 holds a bucket's full gradient only from its first gradient of the step to the end of its
// reduce-scatter: when backward's first gradient arrives, that parameter's bucket is there and no
// other; between steps only the slices are.
TEST_F(DataParallelTest, Zero2AllocatesABucketsFullGradientWhenItsFirstGradientArrives) {
  BertForQuestionAnswering model = make_model(tiny_config(), 1);
  const auto parallel = parallel_for(model, communicator_, {}, options_for("zero2", 40, 100));
  const auto buckets = parallel->bucket_layout();
  ASSERT_GE(buckets.size(), 3u);  // the same on every rank, before any collective
  parallel->broadcast_parameters();
  int64_t slice_bytes = 0;
  for (const auto& bucket : buckets) slice_bytes += bucket.numel / size_ * 4;
  auto bucket_bytes_of = [&](const std::string& name) {
    for (const auto& bucket : buckets)
      if (std::find(bucket.parameters.begin(), bucket.parameters.end(), name) != bucket.parameters.end()) return bucket.numel * 4;
    return int64_t{-1};
  };
  // Pre-hooks of the gradient accumulators, added after DataParallel's: each runs once the bucket
  // was allocated, before the gradient is accumulated and reported ready.
  std::string first_name;
  int64_t held_at_first = -1;
  for (const auto& item : model->named_parameters()) {
    const std::string name = item.key();
    torch::autograd::impl::grad_accumulator(item.value())->add_pre_hook(std::make_unique<BeforeAccumulation>([&, name] {
      if (!first_name.empty()) return;
      first_name = name;
      held_at_first = parallel->memory_footprint().gradients;
    }));
  }
  for (int step = 0; step < 2; ++step) {
    first_name.clear();
    parallel->begin_backward(/*synchronize=*/true);
    EXPECT_EQ(parallel->memory_footprint().gradients, slice_bytes) << "before backward, step " << step;
    qa_backward(model, rank_, step);
    EXPECT_FALSE(first_name.empty());
    EXPECT_EQ(held_at_first, slice_bytes + bucket_bytes_of(first_name)) << first_name << ", step " << step;
    parallel->finish_gradient_sync();
    parallel->clip_and_step(1.0, 1e-3);
    parallel->zero_grad();
    EXPECT_EQ(parallel->memory_footprint().gradients, slice_bytes) << "after step " << step;
  }
}

// ---- Reduced-precision communication (DataParallelOptions::reduce_dtype, param_dtype) ----

class ReducedPrecision : public DataParallelTest {
 protected:
  // This rank's batch.
  torch::Tensor ids() const {
    torch::manual_seed(static_cast<uint64_t>(4000 + rank_));
    return torch::randint(1, tiny_config().vocab_size, {2, 6}, torch::kLong);
  }
  // Every rank's gradient of the plain model (no DataParallel) on its batch, flat in registration
  // order, each divided by the ranks in fp32 as DataParallel divides it.
  std::vector<torch::Tensor> shares_of(BertForQuestionAnswering& plain) const {
    qa_backward_on(plain, ids(), rank_, 0);
    std::vector<torch::Tensor> grads;
    for (const auto& parameter : plain->parameters()) grads.push_back(parameter.grad().reshape({-1}));
    const torch::Tensor mine = torch::cat(grads);
    torch::Tensor everyone = torch::empty({size_ * mine.numel()}, torch::kFloat);
    communicator_->all_gather(mine, everyone, "all-gather of the plain gradients")->wait();
    std::vector<torch::Tensor> shares;
    for (int r = 0; r < size_; ++r) shares.push_back(everyone.narrow(0, r * mine.numel(), mine.numel()) / size_);
    return shares;
  }
  // Where each parameter sits in the flat gradients.
  static std::map<std::string, std::pair<int64_t, int64_t>> flat_ranges(BertForQuestionAnswering& model) {
    std::map<std::string, std::pair<int64_t, int64_t>> ranges;
    int64_t offset = 0;
    for (const auto& item : model->named_parameters()) {
      ranges[item.key()] = {offset, item.value().numel()};
      offset += item.value().numel();
    }
    return ranges;
  }
  // Each gradient this rank's optimizer holds (a whole parameter's, or a slice "NAME[B:E]" of it)
  // equals, element by element, one of `candidates` (flat, registration order), and 0 if it
  // matched none.
  static int64_t mismatches(DataParallel& parallel, const std::map<std::string, std::pair<int64_t, int64_t>>& ranges,
                            const std::vector<torch::Tensor>& candidates) {
    const std::vector<NamedTensor> state = parallel.optimizer_state();  // exp_avg, exp_avg_sq per slot, then adam_steps
    const std::vector<torch::Tensor> held = parallel.held_gradients();
    EXPECT_EQ(held.size() * 2 + 1, state.size());
    int64_t wrong = 0;
    for (size_t i = 0; i < held.size() && 2 * i < state.size(); ++i) {
      std::string name = state[2 * i].name.substr(std::string("exp_avg.").size());
      int64_t begin = 0, end = -1;
      if (const size_t bracket = name.find('['); bracket != std::string::npos) {
        std::sscanf(name.c_str() + bracket, "[%ld:%ld]", &begin, &end);
        name.resize(bracket);
      }
      const auto [offset, numel] = ranges.at(name);
      if (end < 0) end = numel;
      const torch::Tensor got = held[i].reshape({-1});
      torch::Tensor matched = torch::zeros_like(got, torch::kBool);
      for (const auto& candidate : candidates) matched |= got.eq(candidate.narrow(0, offset + begin, end - begin));
      wrong += (~matched).sum().item<int64_t>();
    }
    return wrong;
  }
};

// The sums of `shares` that bf16 with one rounding per addition can give: one per order of
// addition up to commutativity (up to 3 ranks), widened to fp32.
std::vector<torch::Tensor> bf16_sums(const std::vector<torch::Tensor>& shares) {
  std::vector<torch::Tensor> b;
  for (const auto& share : shares) b.push_back(share.to(torch::kBFloat16));
  std::vector<torch::Tensor> sums;
  if (b.size() == 1) sums = {b[0]};
  if (b.size() == 2) sums = {b[0] + b[1]};
  if (b.size() == 3) sums = {(b[0] + b[1]) + b[2], (b[0] + b[2]) + b[1], (b[1] + b[2]) + b[0]};
  for (auto& sum : sums) sum = sum.to(torch::kFloat);
  return sums;
}

// With reduce_dtype bf16 each rank's share crosses the network rounded to bf16 and is summed with
// one rounding per addition; what lands (ddp: every .grad; the others: this rank's slices) is one of
// those sums exactly, widened to fp32, and the reductions moved half the bytes of fp32's (ddp's mask
// of touched rows, a count, stays fp32).
TEST_P(ReducedPrecision, GradientsAreSummedInBf16AndLandInFp32) {
  BertForQuestionAnswering plain = make_model(tiny_config(), 1);
  const std::vector<torch::Tensor> candidates = bf16_sums(shares_of(plain));
  std::map<CommDtype, SyncStats> stats;
  for (CommDtype dtype : {CommDtype::kFp32, CommDtype::kBf16}) {
    BertForQuestionAnswering model = make_model(tiny_config(), 1);
    DataParallelOptions options = options_for(GetParam(), 40, 100);
    options.reduce_dtype = dtype;
    const auto parallel = parallel_for(model, communicator_, {}, options);
    parallel->broadcast_parameters();
    parallel->note_input_ids(ids());
    parallel->begin_backward(true);
    qa_backward_on(model, ids(), rank_, 0);
    parallel->finish_gradient_sync();
    stats[dtype] = parallel->sync_stats();
    if (dtype == CommDtype::kBf16) {
      EXPECT_EQ(mismatches(*parallel, flat_ranges(model), candidates), 0);
      if (GetParam() == "ddp") {
        std::vector<double> sums;
        for (const auto& parameter : model->parameters()) sums.push_back(parameter.grad().sum(torch::kDouble).item<double>());
        EXPECT_TRUE(same_on_every_rank(sums, "gradient sums"));
      }
    }
  }
  const int64_t mask = stats[CommDtype::kBf16].sparse_exchanges > 0 ? tiny_config().vocab_size * 4 : 0;
  EXPECT_EQ(stats[CommDtype::kFp32].bytes - mask, 2 * (stats[CommDtype::kBf16].bytes - mask));
}

INSTANTIATE_TEST_SUITE_P(Strategies, ReducedPrecision, ::testing::ValuesIn(strategies_where(over_every_rank)),
                         strategy_test_name);

// fsdp with param_dtype bf16: forward and backward compute with the weights rounded to bf16 (the
// gathers moved bf16), so the gradients are those of the rounded weights; the slices keep the
// fp32 weights, which evaluation and saving (WholeParameters) gather exactly.
TEST_F(ReducedPrecision, FsdpComputesWithBf16GatheredWeightsAndKeepsFp32Masters) {
  BertForQuestionAnswering rounded = make_model(tiny_config(), 1);
  {
    torch::NoGradGuard no_grad;
    for (auto& parameter : rounded->parameters()) parameter.copy_(parameter.to(torch::kBFloat16).to(torch::kFloat));
  }
  const std::vector<torch::Tensor> shares = shares_of(rounded);
  torch::Tensor average = torch::zeros_like(shares[0]);
  for (const auto& share : shares) average += share;  // the fp32 sum in rank order: exact on up to 2 ranks

  BertForQuestionAnswering model = make_model(tiny_config(), 1), initial = make_model(tiny_config(), 1);
  DataParallelOptions options = options_for("fsdp");
  options.param_dtype = CommDtype::kBf16;
  const auto parallel = parallel_for(model, communicator_, {}, options);
  parallel->broadcast_parameters();
  parallel->begin_backward(true);
  qa_backward_on(model, ids(), rank_, 0);
  parallel->finish_gradient_sync();
  if (size_ <= 2) {
    EXPECT_EQ(mismatches(*parallel, flat_ranges(model), {average}), 0);
  }
  for (const auto& gradient : parallel->held_gradients()) EXPECT_TRUE(gradient.isfinite().all().item<bool>());

  const auto whole = whole_parameters(model, *parallel);
  const auto exact = initial->parameters();
  int64_t not_bf16 = 0;
  for (size_t k = 0; k < whole.size(); ++k) {
    EXPECT_TRUE(torch::equal(whole[k], exact[k])) << "parameter " << k << " was not gathered exactly";
    not_bf16 += whole[k].ne(whole[k].to(torch::kBFloat16).to(torch::kFloat)).sum().item<int64_t>();
  }
  EXPECT_GT(not_bf16, 0) << "the weights must not all be bf16 values, or rounding would go unseen";
}

}  // namespace
}  // namespace mpibert
