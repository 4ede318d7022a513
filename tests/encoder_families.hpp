// The encoder families added after BERT and DistilBERT, as the test suites take them: the fixture
// folder of each under $MPIBERT_FIXTURES/encoders (made by transformers:
// tests/fixtures/encoders/make_fixtures.py), its model_type, architecture and dropout keys. One
// table; each suite parametrizes over it (test_encoder_families, test_data_parallel,
// test_trainer, test_ddp) instead of a copy of its tests per family.
#pragma once

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "mpibert/core/io.hpp"
#include "mpibert/text/hf_tokenizer.hpp"
#include "test_support.hpp"

namespace mpibert::test {

struct EncoderFamily {
  std::string fixture, model_type, architecture;
  std::vector<std::string> dropout_keys;  // every dropout probability of its config.json
  std::string tokenizer;                  // its kind of tokenizer: a folder of $MPIBERT_FIXTURES/tokenizers
  // Its fixture's file `name`.
  std::string file(const std::string& name) const { return fixtures_dir() + "/encoders/" + fixture + "/" + name; }
  std::string tokenizer_dir() const { return fixtures_dir() + "/tokenizers/" + tokenizer; }
  // Its config (as config()) for training on shards made by its tokenizer: an embedding row for
  // each of the tokenizer's ids, the tokenizer's padding id (the trainer refuses another; the
  // ModernBERT fixture's 3 is [CLS] in its tokenizer), and positions for mpibert-prep's 384
  // tokens (RoBERTa's padding offset included).
  nlohmann::json training_config(double dropout) const {
    nlohmann::json json = config(dropout);
    const HfTokenizer tokenizer = HfTokenizer::load(tokenizer_dir());
    json["vocab_size"] = tokenizer.vocab_size();
    json["pad_token_id"] = tokenizer.pad_id();
    if (json.contains("max_position_embeddings")) json["max_position_embeddings"] = 514;
    return json;
  }
  // The fixture's config.json, every dropout at `dropout` when it is not negative.
  nlohmann::json config(double dropout = -1) const {
    nlohmann::json json = read_json_file(file("config.json"));
    if (dropout >= 0)
      for (const std::string& key : dropout_keys) json[key] = dropout;
    return json;
  }
};

inline const std::vector<EncoderFamily>& encoder_families() {
  static const std::vector<std::string> bert_like = {"hidden_dropout_prob", "attention_probs_dropout_prob"};
  static const std::vector<EncoderFamily> table = {
      {"roberta", "roberta", "RobertaForQuestionAnswering", bert_like, "roberta"},
      {"xlm-roberta", "xlm-roberta", "XLMRobertaForQuestionAnswering", bert_like, "xlm-roberta"},
      {"electra", "electra", "ElectraForQuestionAnswering", bert_like, "wordpiece-uncased"},
      {"deberta-v3", "deberta-v2", "DebertaV2ForQuestionAnswering", bert_like, "deberta-v3"},
      {"deberta-v2", "deberta-v2", "DebertaV2ForQuestionAnswering", bert_like, "deberta-v3"},
      {"modernbert",
       "modernbert",
       "ModernBertForQuestionAnswering",
       {"embedding_dropout", "attention_dropout", "mlp_dropout", "classifier_dropout"},
       "modernbert"},
  };
  return table;
}

inline void PrintTo(const EncoderFamily& family, std::ostream* os) { *os << family.fixture; }

// A gtest name of the family: its fixture folder with '_' for '-'.
inline std::string test_name_of(std::string fixture) {
  for (char& c : fixture)
    if (c == '-') c = '_';
  return fixture;
}

inline std::string family_test_name(const ::testing::TestParamInfo<EncoderFamily>& info) {
  return test_name_of(info.param.fixture);
}

}  // namespace mpibert::test
