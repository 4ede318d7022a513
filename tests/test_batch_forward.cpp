// The model on batches as batching.hpp lays them out, packed to a token bucket (a shape a CUDA graph
// replays): the filler feature adds nothing, so the loss and every gradient are plain packing's
// (within the round-off of longer reductions), and no gradient reaches the pad token's embedding.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

#include "mpibert/data/batching.hpp"
#include "mpibert/model/bert_qa.hpp"
#include "mpibert/train/batch_forward.hpp"
#include "test_support.hpp"

namespace mpibert {
namespace {

// Loss and gradients of one forward and backward of the fixture's tiny BERT (dropout off) on `batch`.
std::pair<double, std::vector<torch::Tensor>> loss_and_gradients(const Batch& batch) {
  BertConfig config = BertConfig::load(test::fixtures_dir() + "/model/config.json");
  config.hidden_dropout_prob = config.attention_probs_dropout_prob = 0;
  torch::manual_seed(5);
  BertForQuestionAnswering model(config);
  model->init_weights();
  const torch::Tensor loss = forward_batch(model, batch).loss;
  loss.backward();
  std::vector<torch::Tensor> gradients;
  for (const auto& parameter : model->parameters()) gradients.push_back(parameter.grad().clone());
  return {loss.item<double>(), gradients};
}

TEST(BucketedPacking, TheFillerAddsNothingToTheLossOrTheGradients) {
  test::TempDir dir;
  test::prepare_shards(dir.file("shards"), test::squad_v1_path(), 0, 8, "train");
  const FeatureStore store = FeatureStore::open(dir.file("shards"));
  const std::vector<int64_t> indices = {0, 1, 2, 3, 4, 5};
  const int64_t max_seq_length = store.manifest().params.max_seq_length;
  const Batch plain = make_batch(store, indices, Padding::kPacked);
  const auto [loss, gradients] = loss_and_gradients(plain);
  for (const int64_t granularity : {256, 1024}) {
    SCOPED_TRACE("buckets of " + std::to_string(granularity) + " tokens");
    const TokenBuckets buckets{static_cast<int64_t>(indices.size()), max_seq_length, granularity};
    const Batch bucketed = make_batch(store, indices, Padding::kPacked, 0, false, &buckets);
    ASSERT_GT(bucketed.bucket, plain.real_tokens);
    const auto [bucketed_loss, bucketed_gradients] = loss_and_gradients(bucketed);
    EXPECT_NEAR(bucketed_loss, loss, 1e-6 * loss);
    for (size_t k = 0; k < gradients.size(); ++k)
      EXPECT_TRUE(torch::allclose(bucketed_gradients[k], gradients[k], 1e-5, 1e-7)) << "parameter " << k;
    // The word embedding (parameter 0): the pad token (0) appears only in the filler, whose
    // tokens get no gradient at all.
    EXPECT_TRUE(torch::equal(bucketed_gradients[0][0], torch::zeros_like(bucketed_gradients[0][0])));
    EXPECT_FALSE(plain.input_ids.eq(0).any().item<bool>());
  }
}

}  // namespace
}  // namespace mpibert
