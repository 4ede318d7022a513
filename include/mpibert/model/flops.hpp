// Model FLOPs of training each model for question answering (TrainingFlops, nn/qa_model.hpp):
// the matrix products of forward and backward on the tokens a sample really has. Per token: 6 x
// the weights of the matrix products (QKV, attention output, the two feed-forward layers, the QA
// head). Attention's two products (scores and context) add 12 x layers x hidden per pair of tokens
// of the same sample. Each model's training_flops() gives the same.
#pragma once

#include "mpibert/model/bert_qa.hpp"
#include "mpibert/model/distilbert_qa.hpp"

namespace mpibert {

TrainingFlops bert_qa_training_flops(const BertConfig& config);
TrainingFlops distilbert_qa_training_flops(const DistilBertConfig& config);

}  // namespace mpibert
