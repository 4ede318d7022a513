// ELECTRA (the discriminator) for extractive question answering, HuggingFace's
// ElectraForQuestionAnswering in LibTorch. Its encoder is BERT's (model/bert_qa.hpp: embeddings,
// layers and names, under "electra.") with embeddings of their own width, embedding_size, and a
// Linear to hidden_size after them (embeddings_project) where the two differ (electra-small).
// Token types are used, as BERT's: ELECTRA's tokenizer is BERT's WordPiece.
#pragma once

#include <torch/torch.h>

#include <nlohmann/json.hpp>
#include <string>

#include "mpibert/model/bert_qa.hpp"
#include "mpibert/model/encoder_for_qa.hpp"
#include "mpibert/nn/qa_model.hpp"

namespace mpibert {

// HF's ElectraConfig: BERT's keys with ELECTRA's defaults (electra-small's: hidden 256, 4 heads,
// intermediate 1024) and embedding_size (128).
struct ElectraConfig {
  BertConfig encoder;
  int64_t embedding_size = 128;

  static ElectraConfig from_json(const nlohmann::json& json, const std::string& origin);
  static ElectraConfig load(const std::string& path);
  // "base": electra-base-discriminator; "small": configs/small-bert.json's shape.
  static ElectraConfig preset(const std::string& name);
  nlohmann::ordered_json to_json() const;
  void validate(const std::string& origin) const;
  bool projects() const { return embedding_size != encoder.hidden_size; }
};

// HF's ElectraModel: embeddings (embedding_size wide), embeddings_project where needed, encoder.
// Units: the embeddings, the projection (where there is one), each layer.
class ElectraModelImpl : public QAEncoder {
 public:
  ElectraModelImpl(const ElectraConfig& config, const ModelOptions& options);
  torch::Tensor forward_padded(const torch::Tensor& input_ids, const torch::Tensor& token_type_ids,
                               const torch::Tensor& attention_mask, UnitHooks* hooks) override;
  torch::Tensor forward_packed(const PackedFeatures& features, const VarlenLayout& varlen, UnitHooks* hooks) override;
  BertEmbeddings embeddings{nullptr};
  torch::nn::Linear embeddings_project{nullptr};
  BertEncoder encoder{nullptr};

 private:
  torch::Tensor encode(const torch::Tensor& embedded, const TokenLayout& layout, UnitHooks* hooks);
};
TORCH_MODULE(ElectraModel);

class ElectraForQuestionAnsweringImpl : public EncoderForQuestionAnsweringImpl {
 public:
  explicit ElectraForQuestionAnsweringImpl(const ElectraConfig& config, const ModelOptions& options = {});
  const ElectraConfig& config() const { return config_; }
  ElectraModel electra{nullptr};

 private:
  ElectraForQuestionAnsweringImpl(const ElectraConfig& config, ElectraModel encoder, const ModelOptions& options);
  ElectraConfig config_;
};
TORCH_MODULE(ElectraForQuestionAnswering);

}  // namespace mpibert
