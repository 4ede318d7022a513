#include "mpibert/eval/batch_forward.hpp"

namespace mpibert {

QAOutput forward_batch(QuestionAnsweringModel& model, const Batch& batch) {
  if (!batch.packed())
    return model.forward(batch.input_ids, batch.token_type_ids, batch.attention_mask, batch.start_positions, batch.end_positions);
  const PackedFeatures features{batch.input_ids,       batch.token_type_ids, batch.position_ids,
                                batch.feature_offsets, batch.padded_length,  batch.cumulative_lengths};
  return model.forward_packed(features, batch.start_positions, batch.end_positions);
}

}  // namespace mpibert
