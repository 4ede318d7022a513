// Padded rows (real tokens first, then padding) packed end to end, as make_batch packs features:
// the packed side of the model tests' padded-against-packed parity (test_model, test_distilbert).
#pragma once

#include <torch/torch.h>

#include <algorithm>
#include <vector>

#include "mpibert/nn/qa_model.hpp"

namespace mpibert::test {

inline PackedFeatures pack_rows(const torch::Tensor& ids, const torch::Tensor& types, const torch::Tensor& mask) {
  PackedFeatures packed;
  packed.offsets = {0};
  std::vector<torch::Tensor> id_rows, type_rows, position_rows;
  for (int64_t row = 0; row < ids.size(0); ++row) {
    const int64_t length = mask[row].sum().item<int64_t>();
    id_rows.push_back(ids[row].slice(0, 0, length));
    type_rows.push_back(types[row].slice(0, 0, length));
    position_rows.push_back(torch::arange(length));
    packed.offsets.push_back(packed.offsets.back() + length);
    packed.longest = std::max(packed.longest, length);
  }
  packed.input_ids = torch::cat(id_rows);
  packed.token_type_ids = torch::cat(type_rows);
  packed.position_ids = torch::cat(position_rows);
  return packed;
}

}  // namespace mpibert::test
