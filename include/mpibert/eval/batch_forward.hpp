// The model on a batch as data/batching.hpp lays it out: padded rows with their attention mask,
// or packed features. The seam between the data and model layers, which know nothing of each
// other; evaluation and training run every batch through it.
#pragma once

#include "mpibert/data/batching.hpp"
#include "mpibert/nn/qa_model.hpp"

namespace mpibert {

// Logits, and the loss from the batch's answer positions.
QAOutput forward_batch(QuestionAnsweringModel& model, const Batch& batch);

}  // namespace mpibert
