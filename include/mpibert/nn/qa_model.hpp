// A model for extractive question answering as the trainer, evaluation, checkpoints and the CLI
// see it, whatever its architecture: built from an HF config.json, its weights in and out under
// HF's names, a batch (padded or packed) forward to start/end logits and HF's QA loss, its
// description for the data-parallel strategies, and its training FLOPs. The model layer
// implements it (BERT, DistilBERT, RoBERTa, XLM-RoBERTa, ELECTRA, DeBERTa-v2/v3, ModernBERT) and
// picks one from config.json's model_type (model/model_registry.hpp); nothing above it names a
// concrete model.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mpibert/nn/model_description.hpp"
#include "mpibert/nn/safetensors.hpp"

namespace mpibert {

struct ModelOptions {
  // bf16 autocast around the forward pass (for GPUs); float32 is the default and the parity reference.
  bool autocast_bf16 = false;
  // fp16 autocast instead (GPUs without bf16); training needs loss scaling with it (optim/loss_scaler.hpp).
  bool autocast_fp16 = false;
  // The autocast dtype, if any: kBFloat16, kHalf or nullopt.
  std::optional<at::ScalarType> autocast_dtype() const {
    if (autocast_bf16) return at::kBFloat16;
    if (autocast_fp16) return at::kHalf;
    return std::nullopt;
  }
  // One [hidden, 3*hidden] matmul for Q, K and V instead of three (same parameters, HF names).
  bool fused_qkv = true;
  // Each encoder layer's activations recomputed in backward instead of kept (HF's
  // gradient_checkpointing; model/activation_checkpoint.hpp): the same gradients, a forward more.
  bool gradient_checkpointing = false;
};

struct QAOutput {
  // [batch, seq]. Padded: padding not masked (as HF). Packed: float32, seq is the longest feature,
  // and the positions past a feature's end hold float32's lowest value (no part in the loss).
  torch::Tensor start_logits, end_logits;
  torch::Tensor sequence_output;  // padded: [batch, seq, hidden]; packed: [tokens, hidden]
  torch::Tensor loss;             // undefined unless positions were given
};

// Features packed end to end with no padding anywhere (data/batching.hpp makes them from shards).
struct PackedFeatures {
  torch::Tensor input_ids, token_type_ids, position_ids;  // [tokens] int64; positions count from 0 per feature
  std::vector<int64_t> offsets;                           // feature f holds tokens [offsets[f], offsets[f + 1])
  int64_t longest = 0;                                    // the longest feature: the width of the logits returned
  // The offsets as int32 on the tokens' device (the batch loader's), or undefined: made from
  // `offsets` when needed. A step the GPU replays needs them there: a copy from the host's
  // offsets would be baked into the graph.
  torch::Tensor cumulative_lengths;
};

// Model FLOPs of training, counted as MFU counts them (PaLM, Chowdhery et al. 2022, appendix B):
// the matrix products of forward and backward (backward twice forward's), on the tokens a sample
// really has, not on its padding.
struct TrainingFlops {
  double per_token = 0;
  double per_token_pair = 0;

  // A batch: `tokens` = sum of its samples' real lengths, `token_pairs` = sum of their squares.
  double of(int64_t tokens, int64_t token_pairs) const {
    return per_token * static_cast<double>(tokens) + per_token_pair * static_cast<double>(token_pairs);
  }
};

// The positions a model gives a sequence's tokens: rows [first, rows) of its position table
// (config.json's max_position_embeddings; RoBERTa's count from padding_idx + 1). A family that
// computes its positions (ModernBERT's RoPE, DeBERTa's relative ones) takes the length its config
// declares as the table. A position past it reads another tensor's memory on a GPU.
struct PositionRange {
  int64_t rows = 0, first = 0;
  int64_t longest_sequence() const { return rows - first; }
};

struct LoadReport {
  std::vector<std::string> initialized_fresh;  // model parameters the checkpoint did not have (qa_outputs only)
  std::vector<std::string> ignored;            // checkpoint tensors the QA model has no use for (MLM heads, pooler)
};

class QuestionAnsweringModel {
 public:
  virtual ~QuestionAnsweringModel() = default;

  // HF's names for it: config.json's model_type ("bert") and architectures ("BertForQuestionAnswering").
  virtual std::string model_type() const = 0;
  virtual std::string architecture() const = 0;
  // The module: its parameters under HF's names in HF's order, train()/eval(), to(device).
  virtual torch::nn::Module& module() = 0;
  virtual const ModelOptions& options() const = 0;
  // HF's config.json of this model, model_type and architectures included.
  virtual nlohmann::ordered_json config_json() const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual PositionRange positions() const = 0;

  // Padded rows ([batch, seq]; attention_mask 1 for tokens, 0 for padding). A model without
  // segment embeddings ignores token_type_ids. Positions given: the loss too.
  virtual QAOutput forward(const torch::Tensor& input_ids, const torch::Tensor& token_type_ids,
                           const torch::Tensor& attention_mask, const torch::Tensor& start_positions,
                           const torch::Tensor& end_positions) = 0;
  // Packed features; the loss (with positions) leaves out nothing but the absent padding.
  virtual QAOutput forward_packed(const PackedFeatures& features, const torch::Tensor& start_positions,
                                  const torch::Tensor& end_positions) = 0;

  // The model as data-parallel strategies see it; it refers to this model, which must outlive it.
  virtual ModelDescription description() = 0;
  virtual TrainingFlops training_flops() const = 0;
  // HF's num_parameters(exclude_embeddings=True): its FLOP estimate is 6 x this x tokens.
  virtual int64_t non_embedding_parameters() const = 0;

  // Copies a checkpoint's tensors (HF's names; the model's own checkpoints, its base model's and
  // pretraining ones) into the parameters; anything missing (but the QA head), unexpected or of
  // the wrong shape is an InputError listing every problem.
  virtual LoadReport load_state(const SafetensorsFile& checkpoint) = 0;
  // HF's model.safetensors of this model, in HF's order (with the buffers HF saves), float32 on the CPU.
  virtual std::vector<NamedTensor> state_to_save() = 0;
  // "" when `config` (a config.json of this model type, from `origin`) has this model's shapes;
  // else the keys that differ, with both values.
  virtual std::string shape_mismatch(const nlohmann::json& config, const std::string& origin) const = 0;
  // Why a captured packed step of this model could not be replayed for another batch ("" when it
  // can): a packed forward that loops on the host over the batch's features issues other kernels
  // for every batch.
  virtual std::string packed_step_capture_problem() const { return ""; }
};

using QAModelPtr = std::shared_ptr<QuestionAnsweringModel>;

// "" when `model` has a position for every token of a sequence of `length` tokens; else why not.
inline std::string sequence_length_problem(const QuestionAnsweringModel& model, int64_t length) {
  const PositionRange positions = model.positions();
  if (length <= positions.longest_sequence()) return "";
  return "sequences of up to " + std::to_string(length) + " tokens, but the " + model.model_type() + " model has positions for " +
         std::to_string(positions.longest_sequence()) + " (max_position_embeddings " + std::to_string(positions.rows) +
         (positions.first > 0 ? ", from position " + std::to_string(positions.first) : "") + ")";
}

}  // namespace mpibert
