// The model on batches as batching.hpp lays them out, packed to a token bucket (a shape a CUDA graph
// replays): the filler feature adds nothing, so the loss and every gradient are plain packing's
// (within the round-off of longer reductions), and no gradient reaches the pad token's embedding.
// Then the step a CUDA graph captures (step_graphs.hpp) where it cannot run: the refusals, the
// eager path off the GPU, and what a capture's failed end takes down.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <string>
#include <vector>

#include "mpibert/data/batching.hpp"
#include "mpibert/eval/batch_forward.hpp"
#include "mpibert/model/bert_qa.hpp"
#include "mpibert/train/step_graphs.hpp"
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
  const torch::Tensor loss = forward_batch(*model, batch).loss;
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
    const Batch bucketed = make_batch(store, indices, Padding::kPacked, false, &buckets);
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

// --cuda-graphs is refused with what it would take, one condition at a time.
TEST(StepCapture, EachRunThatCannotBeCapturedIsRefusedWithWhatItWouldTake) {
  const StepCaptureConditions capturable{/*cuda=*/true, /*packed=*/true};
  EXPECT_EQ(steps_cannot_be_captured(capturable), "");
  struct Row {
    std::function<void(StepCaptureConditions&)> change;
    std::string reason;
  };
  const std::vector<Row> rows = {
      {[](StepCaptureConditions& c) { c.cuda = false; }, "CUDA graphs need a GPU"},
      {[](StepCaptureConditions& c) { c.packed = false; }, "give --padding packed"},
      {[](StepCaptureConditions& c) { c.ranks = 2; }, "one rank per job"},
      {[](StepCaptureConditions& c) { c.fp16 = true; }, "use --bf16"},
      {[](StepCaptureConditions& c) { c.accumulation = 2; }, "--gradient-accumulation 1"},
      {[](StepCaptureConditions& c) { c.fused_adamw = false; }, "--optim adamw_torch_fused"},
      {[](StepCaptureConditions& c) { c.deterministic = true; }, "--deterministic"},
      {[](StepCaptureConditions& c) { c.gradient_checkpointing = true; }, "drop --gradient-checkpointing"},
      {[](StepCaptureConditions& c) { c.model_problem = "its attention loops"; },
       "its attention loops: train it without --cuda-graphs"},
  };
  for (const Row& row : rows) {
    StepCaptureConditions run = capturable;
    row.change(run);
    EXPECT_NE(steps_cannot_be_captured(run).find(row.reason), std::string::npos)
        << row.reason << ": " << steps_cannot_be_captured(run);
  }
}

// Where nothing can be captured every step runs eagerly through the same body, the learning rate a
// 0-dim float32 tensor on the device (what the fused CUDA AdamW kernel reads), and the body is
// never told of a replay.
TEST(StepCapture, OffTheGpuEveryStepRunsTheBodyEagerly) {
  StepGraphs graphs(torch::kCPU);
  Batch batch;
  batch.bucket = 512;
  std::vector<double> rates;
  int replays = 0;
  const StepBody body{[&](const Batch&, const torch::Tensor& lr) {
                        EXPECT_EQ(lr.dim(), 0);
                        EXPECT_EQ(lr.scalar_type(), torch::kFloat);
                        rates.push_back(lr.item<double>());
                        return StepResult{torch::tensor(1.0), torch::tensor(2.0)};
                      },
                      [&] { ++replays; }};
  for (double lr : {1e-3, 2e-3, 3e-3, 4e-3}) graphs.run(batch, lr, body);
  ASSERT_EQ(rates.size(), 4u);
  for (size_t i = 0; i < rates.size(); ++i) EXPECT_EQ(rates[i], static_cast<double>(static_cast<float>(1e-3 * (i + 1))));
  EXPECT_EQ(replays, 0);
  EXPECT_EQ(graphs.stats().eager_steps, 4);
  EXPECT_EQ(graphs.stats().captures + graphs.stats().replays, 0);
}

// A stand-in for CUDA graphs: a capture runs the body once (recording it), a replay counts. The
// body throws inside a capture where the test says, as a CUDA call that a capture forbids would.
struct FakeRecorder : StepRecorder {
  explicit FakeRecorder(bool& capturing, int& ended) : capturing(capturing), ended(ended) {}
  void capture(const std::function<void()>& record) override {
    capturing = true;
    try {
      record();
    } catch (...) {
      capturing = false;
      ++ended;
      throw;
    }
    capturing = false;
  }
  void replay() override {}
  bool& capturing;
  int& ended;
};

// A capture that throws is ended, the host state the body changed is put back, and that bucket
// runs eagerly from then on (this batch included), while other buckets capture and replay.
TEST(StepCapture, ACaptureThatThrowsEndsAndItsBucketRunsEagerly) {
  bool capturing = false;
  int ended = 0, host_steps = 0, put_back = 0;
  StepGraphs graphs(torch::kCPU, /*warm_up_steps=*/1, [&] { return std::make_unique<FakeRecorder>(capturing, ended); });
  StepBody body;
  body.run = [&](const Batch& batch, const torch::Tensor&) {
    ++host_steps;  // what AdamW's host count does
    if (capturing && batch.bucket == 1024) throw std::runtime_error("operation not permitted when stream is capturing");
    return StepResult{torch::tensor(1.0), torch::tensor(2.0)};
  };
  body.replayed = [&] { ++host_steps; };
  body.save_host_state = [&] {
    const int saved = host_steps;
    return std::function<void()>([&, saved] {
      host_steps = saved;
      ++put_back;
    });
  };
  auto batch_of = [](int64_t bucket) {
    Batch batch;
    batch.bucket = bucket;
    batch.cumulative_lengths = torch::zeros({2}, torch::kInt32);
    for (torch::Tensor* t :
         {&batch.input_ids, &batch.token_type_ids, &batch.position_ids, &batch.start_positions, &batch.end_positions})
      *t = torch::zeros({1}, torch::kLong);
    return batch;
  };
  std::vector<StepKind> kinds;
  for (int64_t bucket : {512, 1024, 512, 1024, 512, 1024}) {
    const StepResult result = graphs.run(batch_of(bucket), 1e-3, body);
    EXPECT_EQ(result.loss.item<double>(), 1.0);
    kinds.push_back(graphs.last_kind());
  }
  EXPECT_EQ(kinds, (std::vector<StepKind>{StepKind::kEager, StepKind::kEager, StepKind::kCaptured, StepKind::kEager,
                                          StepKind::kReplayed, StepKind::kEager}));
  EXPECT_EQ(ended, 1);       // the failed capture was ended
  EXPECT_EQ(put_back, 1);    // and the host's state put back before the eager step
  EXPECT_EQ(host_steps, 6);  // one step counted per run: nothing of the failed capture
  EXPECT_EQ(graphs.stats().failed_captures, 1);
  EXPECT_EQ(graphs.stats().captures, 1);
  EXPECT_EQ(graphs.stats().replays, 2);  // the capture's own run and the later replay
  EXPECT_EQ(graphs.stats().eager_steps, 4);
  EXPECT_FALSE(capturing);
}

// A capture's end that fails (cudaStreamEndCapture refusing an invalidated capture) leaves the
// pool's routing and the generators' capture to take down: each is, even where one refuses (the end
// had got past it), and the end's own error goes on. An end that succeeds takes down nothing more.
TEST(StepCapture, AFailedCaptureEndTakesDownWhatTheCaptureSetUp) {
  std::vector<std::string> taken_down;
  const CaptureSetUp set_up{[&] { taken_down.push_back("device routing"); },
                            [&] {
                              taken_down.push_back("host routing");
                              throw std::runtime_error("endAllocatePool: not currently recording to mempool_id");
                            },
                            [&] { taken_down.push_back("generator capture"); }};
  try {
    end_capture_or_take_down(
        [] { throw std::runtime_error("CUDA error: operation failed due to a previous error during capture"); }, set_up);
    ADD_FAILURE() << "the end's error was swallowed";
  } catch (const std::runtime_error& error) {
    EXPECT_EQ(std::string(error.what()), "CUDA error: operation failed due to a previous error during capture");
  }
  EXPECT_EQ(taken_down, (std::vector<std::string>{"device routing", "host routing", "generator capture"}));
  taken_down.clear();
  int ends = 0;
  end_capture_or_take_down([&] { ++ends; }, set_up);
  EXPECT_EQ(ends, 1);
  EXPECT_TRUE(taken_down.empty());
}

}  // namespace
}  // namespace mpibert
