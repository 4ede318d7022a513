// Feature shards -> model input tensors. Dynamic padding (the default) pads a batch to its
// longest real length rounded up to a multiple of 8; full padding pads to max_seq_length.
// Logits of real tokens are the same either way (the additive mask removes padding exactly).
#pragma once

#include <torch/torch.h>

#include <vector>

#include "mpibert/shards.hpp"

namespace mpibert {

enum class Padding { kDynamic, kFull };

struct Batch {
  torch::Tensor input_ids, token_type_ids, attention_mask;  // [batch, padded_length] int64
  torch::Tensor start_positions, end_positions;             // [batch] int64
  std::vector<int64_t> feature_indices;                     // global indices, in batch order
  int64_t padded_length = 0;
  int64_t real_tokens = 0;  // sum of real lengths: the work that is not padding
};

Batch make_batch(const FeatureStore& store, const std::vector<int64_t>& feature_indices, Padding padding,
                 int64_t pad_token_id = 0);

}  // namespace mpibert
