// SQuAD examples -> the model's input windows, with HuggingFace run_qa.py semantics: the question,
// then a window of the context, around and between them the special tokens of the tokenizer's
// pair template ([CLS] q [SEP] c [SEP] for BERT, <s> q </s></s> c </s> for RoBERTa), consecutive
// windows overlapping by doc_stride tokens (truncation="only_second", return_overflowing_tokens),
// each window's offsets as HF's fast tokenizer trims that window on its own.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mpibert/data/squad.hpp"
#include "mpibert/text/hf_tokenizer.hpp"

namespace mpibert {

struct FeatureParams {
  int32_t max_seq_length = 384;
  int32_t doc_stride = 128;      // overlap between consecutive windows, in tokens (HF's `stride`)
  int32_t max_query_length = 0;  // 0: questions are never truncated; a too long one is an error
};

// Columnar store of features. Token-level arrays are concatenated over features (real tokens
// only, no padding); `lengths` delimits them.
struct FeatureTable {
  // per token
  std::vector<uint32_t> input_ids;
  std::vector<int32_t> offsets;  // 2 per token: [begin, end) code points into the context, -1 -1 off-context
  // per feature
  std::vector<uint16_t> lengths;                         // real tokens, specials included
  std::vector<uint16_t> context_starts;                  // index of the first context token; token_type_ids are the
                                                         // template's second type from here
  std::vector<int64_t> example_indices;                  // global example index (file order)
  std::vector<uint16_t> window_indices;                  // 0 for the first window of an example
  std::vector<uint16_t> start_positions, end_positions;  // 0/0 (the first special token) when the answer is not inside

  size_t num_features() const { return lengths.size(); }
  size_t num_tokens() const { return input_ids.size(); }
};

// Makes the features of examples [first_example, first_example + num_examples) of `data`.
// Each context is tokenized once and shared by its questions.
FeatureTable make_features(const SquadDataset& data, int64_t first_example, int64_t num_examples, const HfTokenizer& tokenizer,
                           const FeatureParams& params);

// The type id of the context's tokens (and the specials after it) in `tokenizer`'s pair template;
// the question and the specials before the context have type 0. An InputError names the
// tokenizer where its template does not have that shape, begins with no special token (the
// label of an answer outside the window), or pads on the left (the context would come first).
int32_t context_type_id(const HfTokenizer& tokenizer);

}  // namespace mpibert
