// Model FLOPs of training BertForQuestionAnswering, counted as MFU counts them (PaLM, Chowdhery et
// al. 2022, appendix B): the matrix products of forward and backward (backward twice forward's),
// on the tokens a sample really has, not on its padding. Per token: 6 x the weights of the matrix
// products (QKV, attention output, the two feed-forward layers, the QA head). Attention's two
// products (scores and context) add 12 x layers x hidden per pair of tokens of the same sample.
#pragma once

#include <cstdint>

#include "mpibert/model/bert_qa.hpp"

namespace mpibert {

struct TrainingFlops {
  double per_token = 0;
  double per_token_pair = 0;

  // A batch: `tokens` = sum of its samples' real lengths, `token_pairs` = sum of their squares.
  double of(int64_t tokens, int64_t token_pairs) const {
    return per_token * static_cast<double>(tokens) + per_token_pair * static_cast<double>(token_pairs);
  }
};

TrainingFlops bert_qa_training_flops(const BertConfig& config);

}  // namespace mpibert
