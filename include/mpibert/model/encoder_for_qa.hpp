// The question-answering model of any encoder family, written once: HF's ...ForQuestionAnswering
// is an encoder (the family's base model, under its own name: "bert", "distilbert", ...) and a QA
// head, qa_outputs, a Linear of two logits per token (after a dropout for the families whose HF
// class has one). EncoderForQuestionAnswering is that head and everything the QA model interface
// (nn/qa_model.hpp) asks of a model: padded and packed forward, the loss, units and their hooks,
// the description for the data-parallel strategies, FLOPs, HF's files in and out. A family
// supplies its config, its HF names (QAFamily) and its encoder (QAEncoder), in a file of its own
// (bert_qa.cpp, distilbert_qa.cpp), and one row of model/model_registry.cpp.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mpibert/model/encoder_parts.hpp"
#include "mpibert/model/hf_state.hpp"
#include "mpibert/nn/model_description.hpp"
#include "mpibert/nn/qa_model.hpp"

namespace mpibert {

// A family's base model: embeddings (unit 0 for the hooks) and layers (units 1, 2, ...).
class QAEncoder : public torch::nn::Module {
 public:
  // Padded rows [batch, seq] (attention_mask 1 for tokens, 0 for padding; token_type_ids may be
  // undefined: all zero) -> the last hidden state [batch, seq, hidden].
  virtual torch::Tensor forward_padded(const torch::Tensor& input_ids, const torch::Tensor& token_type_ids,
                                       const torch::Tensor& attention_mask, UnitHooks* hooks) = 0;
  // Packed features -> [tokens, hidden]; `varlen`: their layout for the GPU's variable-length kernels.
  virtual torch::Tensor forward_packed(const PackedFeatures& features, const VarlenLayout& varlen, UnitHooks* hooks) = 0;
};

// A transform of the last hidden state before the QA head's Linear, where the family has one
// (ModernBERT's prediction head: dense, activation, norm).
class QAHeadTransform : public torch::nn::Module {
 public:
  virtual torch::Tensor forward(const torch::Tensor& hidden) = 0;
};

// What the QA model needs to know of a family besides its encoder.
struct QAFamily {
  std::string model_type;    // config.json's model_type: "bert"
  std::string architecture;  // "BertForQuestionAnswering"
  std::string encoder_name;  // the encoder's name in HF's state_dict: "bert"
  int64_t hidden_size = 0, layers = 0, vocab_size = 0;
  PositionRange positions;          // its position table's rows and the first it uses
  double qa_dropout = -1;           // a dropout before the QA head (DistilBERT's qa_dropout); < 0: none
  double initializer_range = 0.02;  // HF's _init_weights
  // The encoder's units in forward order, each named by its parameters' prefix: its embeddings
  // ("bert.embeddings."), its layers ("bert.encoder.layer.0.", ...) and whatever else runs on its
  // own between them (DeBERTa's relative embeddings, ModernBERT's final norm).
  std::vector<std::string> unit_prefixes;
  std::string token_embedding;  // the word embedding's parameter name
  // The QA head under HF's names: the Linear of two logits ("qa_outputs"; ModernBERT's
  // "classifier"), its dropout's module name, and the name of the head transform, if any ("head").
  std::string head_name = "qa_outputs";
  std::string dropout_name = "dropout";
  std::string head_transform_name;
  nlohmann::ordered_json config_json;  // HF's config.json of the model
  TrainingFlops flops;                 // model/encoder_parts.hpp encoder_training_flops
  HfStateNames checkpoint_names;       // how HF checkpoints' keys map onto the parameters
  // Buffers HF keeps in its state_dict, after the parameter whose name is the key (BERT's position_ids).
  std::vector<std::pair<std::string, NamedTensor>> saved_buffers;
  // A config.json of the family read as the family reads it (HF's defaults filled in, checked)
  // and written back, and the keys of it that fix the parameters' shapes: a checkpoint of another
  // shape is refused naming them (shape_mismatch).
  std::function<nlohmann::ordered_json(const nlohmann::json& config, const std::string& origin)> read_config;
  std::vector<std::string> shape_keys;
  // HF's _init_weights of the whole QA model where it is not init_hf_weights (ModernBERT's).
  std::function<void(torch::nn::Module& model)> init_weights;
  // Why its packed steps cannot be captured, "" when they can (QuestionAnsweringModel's
  // packed_step_capture_problem).
  std::string packed_step_capture_problem;
};

// The sizes of an encoder that decide its parameters and FLOPs.
struct EncoderShape {
  int64_t hidden_size = 0, layers = 0, intermediate_size = 0, vocab_size = 0;
  double initializer_range = 0.02;
};

// A family as most encoders are laid out under HF's names: its embeddings at
// ENCODER.embeddings.*, word_embeddings among them, its layers at ENCODER.LAYERS.N.*; the
// architecture config_json names; the checkpoint's keys mapped by `to_model`, `ignored` left out.
QAFamily encoder_family(const std::string& model_type, const std::string& encoder_name, const std::string& layers_path,
                        const EncoderShape& shape, nlohmann::ordered_json config_json,
                        std::function<std::string(const std::string&)> to_model, std::function<bool(const std::string&)> ignored);

class EncoderForQuestionAnsweringImpl : public torch::nn::Module, public QuestionAnsweringModel {
 public:
  // Registers `encoder` under family.encoder_name, then the head transform (where there is one),
  // the QA head and its dropout, and initializes every weight as HF's _init_weights does (torch's
  // global generator).
  EncoderForQuestionAnsweringImpl(QAFamily family, std::shared_ptr<QAEncoder> encoder, const ModelOptions& options,
                                  std::shared_ptr<QAHeadTransform> head_transform = nullptr);

  QAOutput forward(const torch::Tensor& input_ids, const torch::Tensor& token_type_ids, const torch::Tensor& attention_mask,
                   const torch::Tensor& start_positions = {}, const torch::Tensor& end_positions = {}) override;
  QAOutput forward_packed(const PackedFeatures& features, const torch::Tensor& start_positions = {},
                          const torch::Tensor& end_positions = {}) override;
  // HF's _init_weights again (the family's; most: normal(0, initializer_range) weights, zero
  // biases, LayerNorm 1/0, each embedding's padding row zeroed).
  void init_weights();
  // The units in forward order by their parameters' prefix: the encoder's, the head transform, the
  // QA head (FSDP's auto-wrap policy for these encoders).
  std::vector<std::string> unit_prefixes() const;
  // Hooks around the units of every forward from now on (nullptr: none). Not owned.
  void set_unit_hooks(UnitHooks* hooks) { unit_hooks_ = hooks; }
  const QAFamily& family() const { return family_; }

  // QuestionAnsweringModel
  std::string model_type() const override { return family_.model_type; }
  std::string architecture() const override { return family_.architecture; }
  torch::nn::Module& module() override { return *this; }
  const ModelOptions& options() const override { return options_; }
  nlohmann::ordered_json config_json() const override { return family_.config_json; }
  int64_t vocab_size() const override { return family_.vocab_size; }
  PositionRange positions() const override { return family_.positions; }
  ModelDescription description() override;
  TrainingFlops training_flops() const override { return family_.flops; }
  int64_t non_embedding_parameters() const override { return count_non_embedding_parameters(*this); }
  LoadReport load_state(const SafetensorsFile& checkpoint) override;
  std::vector<NamedTensor> state_to_save() override;
  std::string shape_mismatch(const nlohmann::json& config, const std::string& origin) const override;
  std::string packed_step_capture_problem() const override { return family_.packed_step_capture_problem; }

  std::shared_ptr<QAEncoder> encoder;
  std::shared_ptr<QAHeadTransform> head_transform;  // where the family has one
  torch::nn::Linear qa_outputs{nullptr};            // HF's family.head_name
  torch::nn::Dropout dropout{nullptr};              // qa_dropout, where the family has one

 private:
  torch::Tensor qa_logits(const torch::Tensor& sequence_output);

  QAFamily family_;
  ModelOptions options_;
  UnitHooks* unit_hooks_ = nullptr;
};
TORCH_MODULE(EncoderForQuestionAnswering);

}  // namespace mpibert
