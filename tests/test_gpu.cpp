// The device-generic path: the model, the communicators and training on a CUDA GPU against the HF
// fixture and against the CPU. Every CUDA test skips, naming the reason, where no GPU is visible;
// the bf16 parity runs on the CPU as well. Runs under mpiexec -n 1 (the NCCL communicator takes
// its unique id over MPI).
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <iostream>
#include <tuple>

#include "encoder_families.hpp"
#include "mpibert/comm/communicator.hpp"
#include "mpibert/core/io.hpp"
#include "mpibert/data/batching.hpp"
#include "mpibert/eval/batch_forward.hpp"
#include "mpibert/model/bert_qa.hpp"
#include "mpibert/model/hf_model_dir.hpp"
#include "mpibert/model/model_registry.hpp"
#include "mpibert/model/varlen_attention.hpp"
#include "mpibert/nn/safetensors.hpp"
#include "mpibert/optim/optimizer.hpp"
#include "mpibert/parallel/data_parallel.hpp"
#include "mpibert/runtime/device.hpp"
#include "mpibert/train/step_graphs.hpp"
#include "mpibert/train/trainer.hpp"
#include "test_support.hpp"

namespace mpibert {
namespace {

#define SKIP_WITHOUT_GPU()                                                                   \
  do {                                                                                       \
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA GPU visible to this process"; \
  } while (0)

std::string model_fixture(const std::string& name) { return test::fixtures_dir() + "/model/" + name; }

double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kCPU, torch::kDouble) - b.to(torch::kCPU, torch::kDouble)).abs().max().item<double>();
}

struct ParityResult {
  double logits = 0, loss = 0, sequence_output = 0;  // max |diff|
  double gradients_abs = 0;                          // worst over the parameters
  double gradients_relative = 0;                     // |g - g_HF| / |g_HF| over all gradients as one vector (L2)
  std::string worst_gradient;
};

// The fixture's forward, loss and backward on `device`, compared with HF's float32 values.
ParityResult fixture_parity(const torch::Device& device, bool bf16) {
  torch::manual_seed(0);
  ModelOptions options;
  options.autocast_bf16 = bf16;
  BertForQuestionAnswering model(BertConfig::load(model_fixture("config.json")), options);
  load_state(model, SafetensorsFile::open(model_fixture("model.safetensors")));
  model->to(device);
  model->eval();
  SafetensorsFile batch = SafetensorsFile::open(model_fixture("batch.safetensors"));
  SafetensorsFile expected = SafetensorsFile::open(model_fixture("expected.safetensors"));
  auto input = [&](const char* name) { return batch.get(name).to(device); };
  QAOutput out = model->forward(input("input_ids"), input("token_type_ids"), input("attention_mask"), input("start_positions"),
                                input("end_positions"));
  out.loss.backward();
  ParityResult result;
  result.logits = std::max(max_abs_diff(out.start_logits, expected.get("start_logits")),
                           max_abs_diff(out.end_logits, expected.get("end_logits")));
  result.loss = max_abs_diff(out.loss, expected.get("loss"));
  result.sequence_output = max_abs_diff(out.sequence_output, expected.get("sequence_output"));
  double error_squares = 0, reference_squares = 0;
  for (const auto& item : model->named_parameters()) {
    const torch::Tensor want = expected.get("grad." + item.key()).to(torch::kDouble);
    const torch::Tensor got = item.value().grad().to(torch::kCPU, torch::kDouble);
    const double absolute = max_abs_diff(got, want);
    if (absolute > result.gradients_abs) {
      result.gradients_abs = absolute;
      result.worst_gradient = item.key();
    }
    error_squares += (got - want).square().sum().item<double>();
    reference_squares += want.square().sum().item<double>();
  }
  result.gradients_relative = std::sqrt(error_squares / reference_squares);
  std::cout << "  " << device << (bf16 ? " bf16" : " fp32") << ": logits " << result.logits << ", loss " << result.loss
            << ", sequence_output " << result.sequence_output << ", gradients max |diff| " << result.gradients_abs << " ("
            << result.worst_gradient << "), relative L2 " << result.gradients_relative << "\n";
  return result;
}

TEST(GpuModelParity, Fp32WithoutTf32MatchesHuggingFace) {
  SKIP_WITHOUT_GPU();
  set_tf32(false);
  const ParityResult result = fixture_parity(torch::Device(torch::kCUDA, 0), false);
  EXPECT_LE(result.logits, 1e-5);
  EXPECT_LE(result.loss, 1e-5);
  EXPECT_LE(result.sequence_output, 1e-5);
  EXPECT_LE(result.gradients_abs, 1e-5) << result.worst_gradient;
}

// bf16 keeps 8 significant bits (relative rounding 2^-9, about 0.2%); autocast runs the matrix
// products in it (accumulating in float32) while LayerNorm, softmax and the loss stay float32.
// Measured on the CPU here: logits 1.8e-3, loss 1.3e-4, last hidden state 4.8e-4, gradients max
// 1.8e-3 and 0.26% relative (L2 over all of them). The bounds are 5-10x those, so they hold for
// another kernel's summation order and still fail for a wrong result (a missing term moves the
// gradients by far more than 2%).
void expect_bf16_within_tolerance(const ParityResult& result) {
  EXPECT_LE(result.logits, 1e-2);
  EXPECT_LE(result.loss, 1e-3);
  EXPECT_LE(result.sequence_output, 5e-3);
  EXPECT_LE(result.gradients_abs, 1e-2) << result.worst_gradient;
  EXPECT_LE(result.gradients_relative, 2e-2);
}

TEST(Bf16ModelParity, CpuAutocastStaysWithinTheStatedTolerance) {
  expect_bf16_within_tolerance(fixture_parity(torch::kCPU, true));
}

TEST(Bf16ModelParity, CudaAutocastStaysWithinTheStatedTolerance) {
  SKIP_WITHOUT_GPU();
  set_tf32(false);
  expect_bf16_within_tolerance(fixture_parity(torch::Device(torch::kCUDA, 0), true));
}

// Packed batches on the GPU (one SDPA call per feature, unmasked, so flash or memory-efficient
// kernels) give the CPU's packed logits, loss and gradients. fp32 without TF32: only summation
// order differs, so 1e-4 leaves room for other kernels and still fails for a wrong result.
// `make_model` builds the same model (seeded) each time it is called; the shards are made by
// `tokenizer` (a tokenizer directory; empty: bert-base-uncased's vocab.txt).
void expect_packed_gpu_follows_cpu(const std::function<QAModelPtr()>& make_model, const std::string& tokenizer = "") {
  set_tf32(false);
  test::TempDir dir;
  test::prepare_shards(dir.path(), test::squad_v1_path(), 0, 12, "train", tokenizer);
  const FeatureStore store = FeatureStore::open(dir.path());
  const Batch batch = make_batch(store, {0, 1, 2, 3, 4, 5}, Padding::kPacked);
  auto run = [&](const torch::Device& device) {
    torch::manual_seed(3);
    QAModelPtr model = make_model();
    model->module().to(device);
    model->module().eval();
    QAOutput out = forward_batch(*model, batch.to(device));
    out.loss.backward();
    return std::pair{out, model};
  };
  const auto [cpu, cpu_model] = run(torch::kCPU);
  const auto [gpu, gpu_model] = run(torch::Device(torch::kCUDA, 0));
  EXPECT_LE(max_abs_diff(gpu.start_logits, cpu.start_logits), 1e-4);
  EXPECT_LE(max_abs_diff(gpu.end_logits, cpu.end_logits), 1e-4);
  EXPECT_LE(max_abs_diff(gpu.loss, cpu.loss), 1e-5);
  double worst = 0;
  const auto gpu_parameters = gpu_model->module().named_parameters();
  for (const auto& item : cpu_model->module().named_parameters())
    worst = std::max(worst, max_abs_diff(gpu_parameters[item.key()].grad(), item.value().grad()));
  EXPECT_LE(worst, 1e-4);
  std::cout << "  " << cpu_model->model_type() << " packed on the GPU against the CPU: loss " << gpu.loss.item<double>() << " / "
            << cpu.loss.item<double>() << ", gradients max |diff| " << worst << "\n";
}

TEST(GpuPackedBatches, FollowTheCpu) {
  SKIP_WITHOUT_GPU();
  expect_packed_gpu_follows_cpu([] { return make_qa_model_from_file(model_fixture("config.json"), {}); });
}

// DistilBERT's blocks through the same varlen kernels: its fixture's shape, with the shards'
// vocabulary and sequence length.
TEST(GpuPackedBatches, DistilBertFollowsTheCpu) {
  SKIP_WITHOUT_GPU();
  nlohmann::json config = read_json_file(test::fixtures_dir() + "/distilbert/config.json");
  config["vocab_size"] = 30522;
  config["max_position_embeddings"] = 512;
  expect_packed_gpu_follows_cpu([&] { return make_qa_model(config, "distilbert fixture config", {}); });
}

// Every encoder family of tests/encoder_families.hpp packed on the GPU (its own attention through
// the varlen kernels, or feature by feature where it adds a bias: DeBERTa's relative scores,
// ModernBERT's window) against its packed CPU run, on shards made by its own kind of tokenizer.
class GpuFamilies : public ::testing::TestWithParam<test::EncoderFamily> {};

TEST_P(GpuFamilies, PackedFollowsTheCpu) {
  SKIP_WITHOUT_GPU();
  const test::EncoderFamily& family = GetParam();
  const nlohmann::json config = family.training_config(0.0);
  expect_packed_gpu_follows_cpu([&] { return make_qa_model(config, family.file("config.json"), {}); }, family.tokenizer_dir());
}

INSTANTIATE_TEST_SUITE_P(Families, GpuFamilies, ::testing::ValuesIn(test::encoder_families()), test::family_test_name);

// Activation checkpointing on the GPU, dropout on, padded (masked SDPA) and packed (the varlen
// kernel), float32 and bf16: the recompute replays the CUDA generator's state, so the dropout masks
// are the forward's. The forward is the same computation (the loss equal bit for bit); gradients
// differ only by the order of the GPU backward kernels' atomic sums (relative L2 1e-5 fp32, 1e-3
// bf16), while one other mask moves them by tens of percent. The CUDA generator is left where the
// run without checkpointing leaves it.
TEST(GpuActivationCheckpointing, ReplaysTheCudaDropoutMasks) {
  SKIP_WITHOUT_GPU();
  set_tf32(false);
  const torch::Device device(torch::kCUDA, 0);
  BertConfig config = BertConfig::load(model_fixture("config.json"));
  config.hidden_dropout_prob = config.attention_probs_dropout_prob = 0.1;
  test::TempDir dir;
  test::prepare_shards(dir.path(), test::squad_v1_path(), 0, 12, "train");
  const FeatureStore store = FeatureStore::open(dir.path());
  for (Padding padding : {Padding::kDynamic, Padding::kPacked}) {
    for (bool bf16 : {false, true}) {
      SCOPED_TRACE(std::string(padding_name(padding)) + (bf16 ? " bf16" : " fp32"));
      const Batch batch = make_batch(store, {0, 1, 2, 3, 4, 5}, padding).to(device);
      auto run = [&](bool checkpointing) {
        ModelOptions options;
        options.autocast_bf16 = bf16;
        options.gradient_checkpointing = checkpointing;
        BertForQuestionAnswering model(config, options);
        load_state(model, SafetensorsFile::open(model_fixture("model.safetensors")));
        model->to(device);
        model->train();
        torch::manual_seed(7);
        const torch::Tensor loss = forward_batch(*model, batch).loss;
        loss.backward();
        return std::tuple{loss, model, torch::rand({4}, torch::TensorOptions().device(device))};
      };
      const auto [plain_loss, plain, plain_draw] = run(false);
      const auto [checkpointed_loss, checkpointed, checkpointed_draw] = run(true);
      EXPECT_TRUE(torch::equal(checkpointed_loss, plain_loss));
      EXPECT_TRUE(torch::equal(checkpointed_draw, plain_draw));
      double error_squares = 0, reference_squares = 0;
      const auto checkpointed_parameters = checkpointed->named_parameters();
      for (const auto& item : plain->named_parameters()) {
        const torch::Tensor want = item.value().grad().to(torch::kCPU, torch::kDouble);
        error_squares +=
            (checkpointed_parameters[item.key()].grad().to(torch::kCPU, torch::kDouble) - want).square().sum().item<double>();
        reference_squares += want.square().sum().item<double>();
      }
      const double relative = std::sqrt(error_squares / reference_squares);
      EXPECT_LE(relative, bf16 ? 1e-3 : 1e-5);
      std::cout << "  " << padding_name(padding) << (bf16 ? " bf16" : " fp32")
                << ": checkpointed gradients against the plain run's, relative L2 " << relative << "\n";
    }
  }
}

// One rank: every collective returns its input, exactly, in place where it should.
void expect_one_rank_round_trip(Communicator& comm, const torch::Device& device) {
  ASSERT_EQ(comm.size(), 1);
  const auto options = torch::TensorOptions().dtype(torch::kFloat).device(device);
  const torch::Tensor values = torch::arange(4099, options) * 0.5f - 7.0f;
  torch::Tensor reduced = values.clone();
  comm.all_reduce_sum(reduced, "all-reduce")->wait();
  EXPECT_TRUE(torch::equal(reduced, values));
  torch::Tensor scattered = torch::zeros_like(values);
  comm.reduce_scatter_sum(values, scattered, "reduce-scatter")->wait();
  EXPECT_TRUE(torch::equal(scattered, values));
  torch::Tensor gathered = torch::zeros_like(values);
  comm.all_gather(values, gathered, "all-gather")->wait();
  EXPECT_TRUE(torch::equal(gathered, values));
  torch::Tensor broadcast = values.clone();
  comm.broadcast(broadcast, 0, "broadcast")->wait();
  EXPECT_TRUE(torch::equal(broadcast, values));
  const torch::Tensor longs = torch::arange(1000, options.dtype(torch::kLong)) * 1000003;
  torch::Tensor reduced_longs = longs.clone();
  comm.all_reduce_sum(reduced_longs, "all-reduce of int64")->wait();
  EXPECT_TRUE(torch::equal(reduced_longs, longs));
  comm.barrier("barrier");
}

// The variable-length kernels (varlen_attention.hpp) against SDPA feature by feature in float64:
// the context and the gradients of q, k and v, for the flash kernel (bf16) and the
// memory-efficient one (float32), over features of uneven lengths.
TEST(GpuVarlenAttention, FollowsAttentionFeatureByFeature) {
  SKIP_WITHOUT_GPU();
  const torch::Device gpu(torch::kCUDA, 0);
  const std::vector<int64_t> offsets = {0, 37, 40, 168, 250};
  const int64_t tokens = offsets.back(), heads = 4, head_size = 64;
  for (const auto& [dtype, limit] : {std::pair{torch::kBFloat16, 2e-2}, std::pair{torch::kFloat, 1e-5}}) {
    torch::manual_seed(3);
    std::array<torch::Tensor, 3> qkv;
    for (auto& x : qkv)
      x = torch::randn({tokens, heads, head_size}, torch::TensorOptions().device(gpu).dtype(dtype)).requires_grad_();
    const auto context = varlen_attention(qkv[0], qkv[1], qkv[2], VarlenLayout::of(offsets, /*longest=*/128, gpu), 0.0);
    ASSERT_TRUE(context.has_value()) << "no variable-length kernel for " << dtype;
    const torch::Tensor upstream = torch::randn_like(*context);
    (*context * upstream).sum().backward();
    std::vector<torch::Tensor> references;
    std::array<torch::Tensor, 3> reference_inputs;
    for (size_t i = 0; i < 3; ++i) reference_inputs[i] = qkv[i].detach().to(torch::kCPU, torch::kDouble).requires_grad_();
    for (size_t f = 0; f + 1 < offsets.size(); ++f) {
      auto feature = [&](const torch::Tensor& x) { return x.slice(0, offsets[f], offsets[f + 1]).transpose(0, 1); };
      references.push_back(at::scaled_dot_product_attention(feature(reference_inputs[0]), feature(reference_inputs[1]),
                                                            feature(reference_inputs[2]))
                               .transpose(0, 1));
    }
    const torch::Tensor reference = torch::cat(references);
    (reference * upstream.to(torch::kCPU, torch::kDouble)).sum().backward();
    EXPECT_LT(max_abs_diff(*context, reference), limit) << dtype;
    for (size_t i = 0; i < 3; ++i)
      EXPECT_LT(max_abs_diff(qkv[i].grad(), reference_inputs[i].grad()), 4 * limit) << dtype << " grad " << i;
    std::cout << "  varlen " << dtype << ": context max |diff| " << max_abs_diff(*context, reference) << "\n";
  }
  // Under --deterministic, or on the CPU, the caller loops over the features instead.
  const auto cpu = torch::randn({8, 2, 8});
  EXPECT_FALSE(varlen_attention(cpu, cpu, cpu, VarlenLayout::of({0, 3, 8}, /*longest=*/5, torch::kCPU), 0.0).has_value());
}

TEST(GpuCommunicator, NcclOneRankRoundTripIsExact) {
  SKIP_WITHOUT_GPU();
  ASSERT_TRUE(nccl_available()) << "a CUDA build without the NCCL backend";
  auto comm = make_communicator(DeviceChoice::kCuda, CommChoice::kAuto, torch::Device(torch::kCUDA, 0), 60);
  EXPECT_EQ(comm->backend(), "nccl");
  expect_one_rank_round_trip(*comm, torch::Device(torch::kCUDA, 0));
}

TEST(GpuCommunicator, MpiStagesCudaTensorsThroughTheHost) {
  SKIP_WITHOUT_GPU();
  auto comm = make_communicator(DeviceChoice::kCuda, CommChoice::kMpi, torch::Device(torch::kCUDA, 0), 60);
  EXPECT_EQ(comm->backend(), "mpi");
  expect_one_rank_round_trip(*comm, torch::Device(torch::kCUDA, 0));
}

// One forward and backward of the same random 4 x 32 batch (seed 6), its gradients synchronized by
// `parallel`.
void backward_on_random_batch(BertForQuestionAnswering& model, DataParallel& parallel, const torch::Device& device) {
  torch::manual_seed(6);
  const auto on = torch::TensorOptions().dtype(torch::kLong).device(device);
  const torch::Tensor ids = torch::randint(1, 500, {4, 32}, on);
  parallel.note_input_ids(ids);
  parallel.begin_backward(true);
  model
      ->forward(ids, torch::zeros_like(ids), torch::ones_like(ids), torch::randint(0, 32, {4}, on),
                torch::randint(0, 32, {4}, on))
      .loss.backward();
  parallel.finish_gradient_sync();
}

// ddp's sparse embedding exchange on a GPU through NCCL (one rank): the mask, nonzero, the rows'
// all-reduce and their copy back give the gradients of the dense exchange, bit for bit.
TEST(GpuSparseEmbedding, RowsGoThroughNcclAndBackAsTheDenseExchangeDoes) {
  SKIP_WITHOUT_GPU();
  const torch::Device device(torch::kCUDA, 0);
  BertConfig config = BertConfig::preset("small");
  config.hidden_dropout_prob = config.attention_probs_dropout_prob = 0;
  std::shared_ptr<Communicator> communicator = make_communicator(DeviceChoice::kCuda, CommChoice::kAuto, device, 60);
  auto gradients_with = [&](EmbeddingExchange exchange, SyncStats* stats) {
    torch::manual_seed(5);
    BertForQuestionAnswering model(config);
    model->init_weights();
    model->to(device);
    DataParallelOptions options;
    options.embedding_exchange = exchange;
    const auto parallel = make_data_parallel(model_description(model), communicator, {}, options);
    backward_on_random_batch(model, *parallel, device);
    *stats = parallel->sync_stats();
    std::vector<torch::Tensor> grads;
    for (const auto& parameter : model->parameters()) grads.push_back(parameter.grad().cpu());
    return grads;
  };
  SyncStats sparse_stats, dense_stats;
  const auto sparse = gradients_with(EmbeddingExchange::kSparse, &sparse_stats);
  const auto dense = gradients_with(EmbeddingExchange::kDense, &dense_stats);
  ASSERT_EQ(sparse.size(), dense.size());
  for (size_t k = 0; k < sparse.size(); ++k) EXPECT_TRUE(torch::equal(sparse[k], dense[k])) << "parameter " << k;
  EXPECT_EQ(sparse_stats.sparse_exchanges, 1);
  EXPECT_GT(sparse_stats.embedding_rows, 0);
  EXPECT_LT(sparse_stats.embedding_rows, 500);
  EXPECT_LT(sparse_stats.bytes, dense_stats.bytes);
}

// Reduced-precision communication through NCCL (one rank): with reduce_dtype bf16 every strategy's
// gradient is the plain model's rounded to bf16 (one rank's sum is its own share) and half of
// fp32's bytes went; fsdp with param_dtype bf16 gets the gradient of the weights rounded to bf16.
TEST(GpuReducedPrecision, Bf16ReductionsAndGathersGoThroughNccl) {
  SKIP_WITHOUT_GPU();
  const torch::Device device(torch::kCUDA, 0);
  BertConfig config = BertConfig::preset("small");
  config.hidden_dropout_prob = config.attention_probs_dropout_prob = 0;
  std::shared_ptr<Communicator> communicator = make_communicator(DeviceChoice::kCuda, CommChoice::kAuto, device, 60);
  auto gradients_with = [&](const std::string& strategy, CommDtype reduce, CommDtype gather, bool round_weights, int64_t* bytes) {
    torch::manual_seed(5);
    BertForQuestionAnswering model(config);
    model->init_weights();
    if (round_weights) {
      torch::NoGradGuard no_grad;
      for (auto& parameter : model->parameters()) parameter.copy_(parameter.to(torch::kBFloat16).to(torch::kFloat));
    }
    model->to(device);
    DataParallelOptions options;
    options.strategy = strategy;
    options.reduce_dtype = reduce;
    options.param_dtype = gather;
    const auto parallel = make_data_parallel(model_description(model), communicator, {}, options);
    parallel->broadcast_parameters();
    backward_on_random_batch(model, *parallel, device);
    *bytes = parallel->sync_stats().bytes;
    std::vector<torch::Tensor> grads;
    for (const auto& gradient : parallel->held_gradients()) grads.push_back(gradient.cpu());
    return grads;
  };
  for (const std::string strategy : {"ddp", "zero1", "zero2", "fsdp"}) {
    SCOPED_TRACE(strategy);
    int64_t fp32_bytes = 0, bf16_bytes = 0;
    const auto fp32 = gradients_with(strategy, CommDtype::kFp32, CommDtype::kFp32, false, &fp32_bytes);
    const auto bf16 = gradients_with(strategy, CommDtype::kBf16, CommDtype::kFp32, false, &bf16_bytes);
    ASSERT_EQ(fp32.size(), bf16.size());
    for (size_t k = 0; k < fp32.size(); ++k)
      EXPECT_TRUE(torch::equal(bf16[k], fp32[k].to(torch::kBFloat16).to(torch::kFloat))) << "gradient " << k;
    const int64_t mask = strategy == "ddp" ? config.vocab_size * 4 : 0;  // ddp's touched rows, a count in fp32
    EXPECT_EQ(fp32_bytes - mask, 2 * (bf16_bytes - mask));
  }
  int64_t bytes = 0;
  const auto rounded = gradients_with("fsdp", CommDtype::kFp32, CommDtype::kFp32, true, &bytes);
  const auto gathered = gradients_with("fsdp", CommDtype::kFp32, CommDtype::kBf16, false, &bytes);
  ASSERT_EQ(rounded.size(), gathered.size());
  for (size_t k = 0; k < rounded.size(); ++k) EXPECT_TRUE(torch::equal(gathered[k], rounded[k])) << "gradient " << k;
}

// adamw_torch_fused on CUDA (its step count a device tensor) updates as on the CPU.
TEST(GpuFusedAdamW, FollowsTheCpu) {
  SKIP_WITHOUT_GPU();
  auto parameters_after = [](const torch::Device& device) {
    torch::manual_seed(8);
    BertForQuestionAnswering model(BertConfig::preset("small"));
    model->to(device);
    AdamWOptions options;
    options.weight_decay = 0.01;
    options.fused = true;
    AdamW optimizer(model->named_parameters(), options);
    for (int step = 0; step < 3; ++step) {
      torch::manual_seed(20 + step);
      for (auto& parameter : model->parameters()) parameter.mutable_grad() = torch::randn(parameter.sizes()).to(device);
      optimizer.step(1e-3);
    }
    std::vector<torch::Tensor> out;
    for (const auto& parameter : model->parameters()) out.push_back(parameter.detach().cpu());
    return out;
  };
  const auto cpu = parameters_after(torch::kCPU), gpu = parameters_after(torch::Device(torch::kCUDA, 0));
  for (size_t k = 0; k < cpu.size(); ++k) EXPECT_TRUE(torch::allclose(gpu[k], cpu[k], 1e-5, 1e-6)) << "parameter " << k;
}

// Short training runs of the fixture's tiny BERT (dropout 0) on `articles` of SQuAD v1.1 dev, each
// into a directory of its own, returning each step's loss.
class FixtureRuns {
 public:
  explicit FixtureRuns(int64_t articles) {
    test::prepare_shards(data_.file("train"), test::squad_v1_path(), 0, articles, "train");
    test::write_text(data_.file("config.json"), read_file(model_fixture("config.json")));
  }
  // Batch 8, learning rate 1e-3, no logging steps; `steps` and the rest as `o` gives them.
  TrainOptions options(const std::string& name, int64_t steps) const {
    TrainOptions o;
    o.train_dir = data_.file("train");
    o.output_dir = data_.file(name);
    o.model_config = data_.file("config.json");
    o.tokenizer = test::vocab_path();
    o.max_steps = steps;
    o.batch_size = 8;
    o.learning_rate = 1e-3;
    o.logging_steps = 0;
    return o;
  }
  std::vector<double> losses(const TrainOptions& o) const {
    train(o);
    std::vector<double> losses;
    for (const auto& line : test::read_lines(o.output_dir + "/metrics.jsonl"))
      losses.push_back(nlohmann::json::parse(line).at("loss").get<double>());
    return losses;
  }
  std::string file(const std::string& name) const { return data_.file(name); }

 private:
  test::TempDir data_;
};

TEST(GpuTraining, TwentyStepsOnTheGpuFollowTheCpu) {
  SKIP_WITHOUT_GPU();
  const FixtureRuns runs(160);
  auto losses_on = [&](const std::string& device) {
    TrainOptions o = runs.options(device, 20);
    o.device = device == "cuda" ? DeviceChoice::kCuda : DeviceChoice::kCpu;
    return runs.losses(o);
  };
  set_tf32(false);
  const std::vector<double> cpu = losses_on("cpu"), gpu = losses_on("cuda");
  ASSERT_EQ(cpu.size(), 20u);
  ASSERT_EQ(gpu.size(), 20u);
  for (size_t step = 0; step < cpu.size(); ++step) EXPECT_NEAR(gpu[step], cpu[step], 1e-4) << "step " << step + 1;
  const auto results = nlohmann::json::parse(read_file(runs.file("cuda/results.json")));
  EXPECT_EQ(results["environment"]["devices"]["type"], "cuda");
  EXPECT_GT(results["peak_gpu_memory_bytes"].get<int64_t>(), 0);
}

// --cuda-graphs: the step captured per token bucket and replayed trains as the eager step does
// (fp32 without TF32, dropout off: the same kernels on other buffers, the bucket's filler adding
// nothing), AdamW counts every replayed step, and the buckets were captured and replayed.
TEST(GpuStepGraphs, ReplayedStepsFollowTheEagerOnes) {
  SKIP_WITHOUT_GPU();
  const FixtureRuns runs(320);
  constexpr int64_t kSteps = 30;
  auto run = [&](const std::string& name, bool graphs) {
    TrainOptions o = runs.options(name, kSteps);
    o.padding = Padding::kPacked;
    o.device = DeviceChoice::kCuda;
    o.cuda_graphs = graphs;
    return runs.losses(o);
  };
  set_tf32(false);
  const std::vector<double> eager = run("eager", false), graphed = run("graphed", true);
  ASSERT_EQ(eager.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(graphed.size(), static_cast<size_t>(kSteps));
  for (size_t step = 0; step < eager.size(); ++step) EXPECT_NEAR(graphed[step], eager[step], 1e-4) << "step " << step + 1;
  const auto results = nlohmann::json::parse(read_file(runs.file("graphed/results.json")));
  std::cout << "  step graphs: " << results["step_graphs"].dump() << "\n";
  EXPECT_GE(results["step_graphs"]["captures"].get<int64_t>(), 1);
  EXPECT_GT(results["step_graphs"]["replays"].get<int64_t>(), kSteps / 2);
  const std::string checkpoint = "/checkpoint-" + std::to_string(kSteps) + "/";
  for (const char* name : {"eager", "graphed"}) {
    SafetensorsFile optimizer = SafetensorsFile::open(runs.file(name + checkpoint + "optimizer.safetensors"));
    EXPECT_EQ(optimizer.get("adam_steps").item<int64_t>(), kSteps) << name;
  }
  SafetensorsFile eager_weights = SafetensorsFile::open(runs.file("eager" + checkpoint + "model.safetensors"));
  SafetensorsFile graphed_weights = SafetensorsFile::open(runs.file("graphed" + checkpoint + "model.safetensors"));
  for (const NamedTensor& weight : eager_weights.tensors())
    EXPECT_TRUE(torch::allclose(graphed_weights.get(weight.name), weight.tensor, 1e-4, 1e-5)) << weight.name;
}

// The private pool that owns `tensor`'s memory ({0, 0}: the normal pool), from the allocator's snapshot.
c10::MempoolId_t pool_owning(const torch::Tensor& tensor) {
  const auto address = reinterpret_cast<size_t>(tensor.data_ptr());
  for (const auto& segment : c10::cuda::CUDACachingAllocator::snapshot().segments)
    if (address >= segment.address && address < segment.address + segment.total_size) return segment.owner_private_pool_id;
  ADD_FAILURE() << "no segment of the allocator holds the tensor";
  return {-1, -1};
}

// A capture that fails in a way its end cannot mend (a host read of the device inside it: the sync
// invalidates the capture, so cudaStreamEndCapture fails too) leaves the allocator and the generator
// as they were: allocations go to the normal pool, an eager dropout runs, and a fresh capture
// sharing the pool records and replays. Its own process (gpu_check's graphs-failed-capture row).
TEST(GpuFailedCapture, AfterAFailedCaptureAllocationsDropoutAndAFreshCaptureWork) {
  SKIP_WITHOUT_GPU();
  const torch::Device device(torch::kCUDA, 0);
  const MakeStepRecorder make_recorder = cuda_step_recorder(device);
  ASSERT_TRUE(make_recorder);
  const torch::Tensor x = torch::ones({1024}, torch::TensorOptions().device(device));
  EXPECT_EQ((x * 2).sum().item<float>(), 2048.0f);  // the kernels loaded, outside any capture
  std::unique_ptr<StepRecorder> failing = make_recorder();
  EXPECT_THROW(failing->capture([&] { (x * 2).sum().item<float>(); }), std::exception);
  failing.reset();
  const torch::Tensor after = torch::empty({3 << 20}, torch::TensorOptions().device(device));  // 12 MiB: a segment of its own
  EXPECT_EQ(pool_owning(after), (c10::MempoolId_t{0, 0}));
  EXPECT_NO_THROW(torch::dropout(x, 0.1, /*train=*/true).sum().item<float>());
  torch::Tensor tripled;
  std::unique_ptr<StepRecorder> fresh = make_recorder();
  ASSERT_NO_THROW(fresh->capture([&] { tripled = x * 3; }));
  EXPECT_NE(pool_owning(tripled), (c10::MempoolId_t{0, 0}));  // the graph's own pool
  fresh->replay();
  EXPECT_EQ(tripled.sum().item<float>(), 3072.0f);
  // The premise, last (it leaves what the recorder mends): PyTorch's own end fails after such a sync.
  const c10::cuda::CUDAStreamGuard side(c10::cuda::getStreamFromPool(false, device.index()));
  at::cuda::CUDAGraph unmended;
  unmended.capture_begin(at::cuda::graph_pool_handle(), cudaStreamCaptureModeThreadLocal);
  EXPECT_THROW((x * 2).sum().item<float>(), std::exception);
  EXPECT_THROW(unmended.capture_end(), std::exception);
}

}  // namespace
}  // namespace mpibert
