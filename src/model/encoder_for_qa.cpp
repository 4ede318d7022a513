#include "mpibert/model/encoder_for_qa.hpp"

#include <sstream>

namespace mpibert {

EncoderForQuestionAnsweringImpl::EncoderForQuestionAnsweringImpl(QAFamily family, std::shared_ptr<QAEncoder> encoder_module,
                                                                 const ModelOptions& options,
                                                                 std::shared_ptr<QAHeadTransform> transform)
    : family_(std::move(family)), options_(options) {
  encoder = register_module(family_.encoder_name, std::move(encoder_module));
  if (transform) head_transform = register_module(family_.head_transform_name, std::move(transform));
  qa_outputs = register_module(family_.head_name, torch::nn::Linear(family_.hidden_size, 2));
  if (family_.qa_dropout >= 0) dropout = register_module(family_.dropout_name, torch::nn::Dropout(family_.qa_dropout));
  init_weights();
}

void EncoderForQuestionAnsweringImpl::init_weights() {
  if (family_.init_weights)
    family_.init_weights(*this);
  else
    init_hf_weights(*this, family_.initializer_range);
}

std::vector<std::string> EncoderForQuestionAnsweringImpl::unit_prefixes() const {
  std::vector<std::string> prefixes = family_.unit_prefixes;
  if (head_transform) prefixes.push_back(family_.head_transform_name + ".");
  prefixes.push_back(family_.head_name + ".");
  return prefixes;
}

ModelDescription EncoderForQuestionAnsweringImpl::description() {
  ModelDescription description;
  for (const auto& item : named_parameters()) description.parameters.emplace_back(item.key(), item.value());
  description.unit_prefixes = unit_prefixes();
  description.token_embedding = family_.token_embedding;
  description.set_unit_hooks = [this](UnitHooks* hooks) { set_unit_hooks(hooks); };
  return description;
}

// The head transform and the QA head are the units after the encoder's.
torch::Tensor EncoderForQuestionAnsweringImpl::qa_logits(const torch::Tensor& sequence_output) {
  size_t unit = family_.unit_prefixes.size();
  torch::Tensor hidden = sequence_output;
  if (head_transform) hidden = run_unit(unit_hooks_, unit++, [&] { return head_transform->forward(hidden); });
  return run_unit(unit_hooks_, unit, [&] { return qa_outputs(dropout ? dropout(hidden) : hidden); });
}

QAOutput EncoderForQuestionAnsweringImpl::forward(const torch::Tensor& input_ids, const torch::Tensor& token_type_ids,
                                                  const torch::Tensor& attention_mask, const torch::Tensor& start_positions,
                                                  const torch::Tensor& end_positions) {
  QAOutput out;
  AutocastGuard autocast(options_.autocast_dtype(), input_ids.device().type());
  out.sequence_output = encoder->forward_padded(input_ids, token_type_ids, attention_mask, unit_hooks_);
  set_padded_logits(out, qa_logits(out.sequence_output), start_positions, end_positions);
  return out;
}

QAOutput EncoderForQuestionAnsweringImpl::forward_packed(const PackedFeatures& features, const torch::Tensor& start_positions,
                                                         const torch::Tensor& end_positions) {
  QAOutput out;
  AutocastGuard autocast(options_.autocast_dtype(), features.input_ids.device().type());
  // One layout on the GPU serves every layer and the logits.
  const VarlenLayout varlen = packed_layout(features);
  out.sequence_output = encoder->forward_packed(features, varlen, unit_hooks_);
  set_packed_logits(out, qa_logits(out.sequence_output), features, varlen, start_positions, end_positions);
  return out;
}

LoadReport EncoderForQuestionAnsweringImpl::load_state(const SafetensorsFile& checkpoint) {
  return load_hf_state(*this, checkpoint, family_.checkpoint_names);
}

std::vector<NamedTensor> EncoderForQuestionAnsweringImpl::state_to_save() {
  std::vector<NamedTensor> tensors;
  for (const auto& item : named_parameters()) {
    tensors.push_back({item.key(), item.value().detach().to(torch::kCPU, torch::kFloat)});
    for (const auto& [after, buffer] : family_.saved_buffers)
      if (item.key() == after) tensors.push_back(buffer);
  }
  return tensors;
}

// "key saved (this run: ours), ..." for each shape key where `config` differs from this model's.
std::string EncoderForQuestionAnsweringImpl::shape_mismatch(const nlohmann::json& config, const std::string& origin) const {
  const nlohmann::ordered_json saved = family_.read_config(config, origin);
  std::ostringstream out;
  for (const std::string& key : family_.shape_keys)
    if (saved.value(key, nlohmann::ordered_json()) != family_.config_json.value(key, nlohmann::ordered_json()))
      out << (out.tellp() > 0 ? ", " : "") << key << " " << saved.value(key, nlohmann::ordered_json()).dump()
          << " (this run: " << family_.config_json.value(key, nlohmann::ordered_json()).dump() << ")";
  return out.str();
}

QAFamily encoder_family(const std::string& model_type, const std::string& encoder_name, const std::string& layers_path,
                        const EncoderShape& shape, nlohmann::ordered_json config_json,
                        std::function<std::string(const std::string&)> to_model,
                        std::function<bool(const std::string&)> ignored) {
  QAFamily family;
  family.model_type = model_type;
  family.architecture = config_json.at("architectures").at(0).get<std::string>();
  family.encoder_name = encoder_name;
  family.hidden_size = shape.hidden_size;
  family.layers = shape.layers;
  family.vocab_size = shape.vocab_size;
  family.initializer_range = shape.initializer_range;
  family.unit_prefixes = {encoder_name + ".embeddings."};
  for (int64_t layer = 0; layer < shape.layers; ++layer)
    family.unit_prefixes.push_back(encoder_name + "." + layers_path + "." + std::to_string(layer) + ".");
  family.token_embedding = encoder_name + ".embeddings.word_embeddings.weight";
  family.config_json = std::move(config_json);
  family.flops = encoder_training_flops(shape.hidden_size, shape.layers, shape.intermediate_size);
  family.checkpoint_names = {family.architecture, std::move(to_model), std::move(ignored)};
  return family;
}

}  // namespace mpibert
