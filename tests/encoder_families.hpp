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
#include "test_support.hpp"

namespace mpibert::test {

struct EncoderFamily {
  std::string fixture, model_type, architecture;
  std::vector<std::string> dropout_keys;  // every dropout probability of its config.json
  // Its fixture's file `name`.
  std::string file(const std::string& name) const { return fixtures_dir() + "/encoders/" + fixture + "/" + name; }
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
      {"roberta", "roberta", "RobertaForQuestionAnswering", bert_like},
      {"xlm-roberta", "xlm-roberta", "XLMRobertaForQuestionAnswering", bert_like},
      {"electra", "electra", "ElectraForQuestionAnswering", bert_like},
      {"deberta-v3", "deberta-v2", "DebertaV2ForQuestionAnswering", bert_like},
      {"deberta-v2", "deberta-v2", "DebertaV2ForQuestionAnswering", bert_like},
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
