// RoBERTa and XLM-RoBERTa for extractive question answering, HuggingFace's
// RobertaForQuestionAnswering and XLMRobertaForQuestionAnswering in LibTorch: one family file, as
// transformers' two are the same code under two names (XLM-R's modeling file is RoBERTa's, copied;
// only the config's defaults and model_type differ). The encoder is BERT's (model/bert_qa.hpp:
// its embeddings, layers and names, under "roberta."), with RoBERTa's positions: they count from
// pad_token_id + 1 over a row's tokens, and the padding takes the position table's padding row.
// Token types are not used: RoBERTa's tokenizers give none, so HF's run_qa passes none (the
// type_vocab_size-1 table of roberta-base sees segment 0 only).
#pragma once

#include <torch/torch.h>

#include <nlohmann/json.hpp>
#include <string>

#include "mpibert/model/bert_qa.hpp"
#include "mpibert/model/encoder_for_qa.hpp"
#include "mpibert/nn/qa_model.hpp"

namespace mpibert {

// HF's RobertaConfig and XLMRobertaConfig: BERT's keys with their own defaults (pad_token_id 1,
// bos 0, eos 2; vocab_size 50265 for RoBERTa, 30522 for XLM-R) and model_type.
struct RobertaConfig {
  BertConfig encoder;
  std::string model_type = "roberta";  // or "xlm-roberta"
  int64_t bos_token_id = 0, eos_token_id = 2;

  // Reads HF's config.json as the `model_type` family; throws InputError naming `origin` and the key.
  static RobertaConfig from_json(const nlohmann::json& json, const std::string& origin,
                                 const std::string& model_type = "roberta");
  static RobertaConfig load(const std::string& path);
  // "base": roberta-base or xlm-roberta-base (514 positions, one token type, eps 1e-5); "small":
  // configs/small-bert.json's shape.
  static RobertaConfig preset(const std::string& name, const std::string& model_type = "roberta");
  nlohmann::ordered_json to_json() const;
  std::string architecture() const;
  void validate(const std::string& origin) const;
};

// HF's XLMRobertaConfig: RoBERTa's keys under model_type "xlm-roberta", with its defaults. The
// model registry's row for "xlm-roberta" reads it; the model built from it is RoBERTa's.
struct XlmRobertaConfig : RobertaConfig {
  static XlmRobertaConfig from_json(const nlohmann::json& json, const std::string& origin) {
    return {RobertaConfig::from_json(json, origin, "xlm-roberta")};
  }
  static XlmRobertaConfig preset(const std::string& name) { return {RobertaConfig::preset(name, "xlm-roberta")}; }
};

// HF's RobertaModel without its pooler (the QA model has none): BERT's embeddings and encoder.
class RobertaModelImpl : public QAEncoder {
 public:
  RobertaModelImpl(const RobertaConfig& config, const ModelOptions& options);
  torch::Tensor forward_padded(const torch::Tensor& input_ids, const torch::Tensor& token_type_ids,
                               const torch::Tensor& attention_mask, UnitHooks* hooks) override;
  torch::Tensor forward_packed(const PackedFeatures& features, const VarlenLayout& varlen, UnitHooks* hooks) override;
  BertEmbeddings embeddings{nullptr};
  BertEncoder encoder{nullptr};

 private:
  int64_t padding_idx_;
};
TORCH_MODULE(RobertaModel);

class RobertaForQuestionAnsweringImpl : public EncoderForQuestionAnsweringImpl {
 public:
  explicit RobertaForQuestionAnsweringImpl(const RobertaConfig& config, const ModelOptions& options = {});
  const RobertaConfig& config() const { return config_; }
  RobertaModel roberta{nullptr};

 private:
  RobertaForQuestionAnsweringImpl(const RobertaConfig& config, RobertaModel encoder, const ModelOptions& options);
  RobertaConfig config_;
};
TORCH_MODULE(RobertaForQuestionAnswering);

}  // namespace mpibert
