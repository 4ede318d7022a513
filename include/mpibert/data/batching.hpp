// Feature shards -> model input tensors. Dynamic padding (the default) pads a batch to its
// longest real length rounded up to a multiple of 8; full padding pads to max_seq_length; packed
// batches have no padding at all: the features' tokens end to end in one sequence, with their
// offsets. Logits of real tokens are the same every way (the additive mask removes padding exactly,
// packed attention stays within each feature).
#pragma once

#include <torch/torch.h>

#include <algorithm>
#include <future>
#include <optional>
#include <string>
#include <vector>

#include "mpibert/data/shards.hpp"

namespace mpibert {

enum class Padding { kDynamic, kFull, kPacked };

const char* padding_name(Padding padding);  // "dynamic", "full", "packed"

// Packed batches of a few fixed shapes, for a step the GPU captures once per shape and replays
// (CUDA graphs, whose kernels have their sizes baked in): a full batch's tokens are padded up to a
// bucket, the first multiple of `granularity` above them, with one filler feature of pad tokens
// (positions 0, 1, ... wrapping at the model's position limit; start and end past the logits,
// which the loss ignores: it adds nothing to the loss or the gradients), and its logits are
// `logits_width()` wide whatever its longest feature. A batch of fewer features (an epoch's last)
// is not bucketed.
struct TokenBuckets {
  int64_t batch_size = 0;      // features per bucketed batch
  int64_t max_seq_length = 0;  // the shards'
  int64_t granularity = 512;
  int64_t position_limit = 512;  // the model's longest sequence (QuestionAnsweringModel::positions): ids stay below it
  // The bucket (tokens) for `features` features of `real_tokens` tokens; 0: none applies.
  int64_t bucket_of(int64_t features, int64_t real_tokens) const;
  // Every bucket a batch can fall in, ascending.
  std::vector<int64_t> all() const;
  // The logits' width and the attention kernels' longest sequence: a feature or the filler.
  int64_t logits_width() const { return std::max(max_seq_length, granularity); }
};

struct Batch {
  // Padded: [batch, padded_length] int64. Packed: input_ids and token_type_ids [tokens], the
  // attention mask undefined, position_ids [tokens] (each feature counts from 0).
  torch::Tensor input_ids, token_type_ids, attention_mask, position_ids;
  torch::Tensor start_positions, end_positions;  // [batch] int64
  std::vector<int64_t> feature_indices;          // global indices, in batch order
  // Packed only: feature f holds tokens [feature_offsets[f], feature_offsets[f + 1]); the same as
  // the tensor the variable-length attention kernels take ([features + 1] int32), which travels
  // with the batch so that a step reads no host value.
  std::vector<int64_t> feature_offsets;
  torch::Tensor cumulative_lengths;
  int64_t padded_length = 0;     // packed: the longest feature (the width of the logits returned)
  int64_t real_tokens = 0;       // sum of real lengths: the work that is not padding
  int64_t real_token_pairs = 0;  // sum of squared real lengths: attention's work without padding
  // Packed to a TokenBuckets bucket: its tokens (the filler is the last feature of feature_offsets
  // and of the positions, beyond feature_indices); 0 otherwise.
  int64_t bucket = 0;

  bool packed() const { return !feature_offsets.empty(); }
  // The tensors on `device`; from pinned memory the copies do not block the host.
  Batch to(const torch::Device& device) const;
};

// Padding and fillers take the id of the tokenizer's padding token (the store's manifest).
// `pin_memory`: host tensors in page-locked memory, for asynchronous copies to a GPU (needs one).
// `buckets` (packed only): padded to a bucket where one applies.
Batch make_batch(const FeatureStore& store, const std::vector<int64_t>& feature_indices, Padding padding, bool pin_memory = false,
                 const TokenBuckets* buckets = nullptr);

// The micro-batches of one epoch's feature order, from micro-batch `first` on, `batch_size`
// features each (the last may be shorter), delivered on `device`. Each batch is made on a helper
// thread while the step before it runs; on a GPU in pinned memory, copied without blocking.
class BatchLoader {
 public:
  BatchLoader(const FeatureStore& store, std::vector<int64_t> order, int64_t batch_size, int64_t first, Padding padding,
              torch::Device device, std::optional<TokenBuckets> buckets = std::nullopt);
  ~BatchLoader();
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  bool exhausted() const { return next_ >= count_; }
  Batch next();  // std::logic_error once exhausted

 private:
  void start(int64_t micro_batch);
  const FeatureStore& store_;
  std::vector<int64_t> order_;
  int64_t batch_size_, next_, count_;
  Padding padding_;
  torch::Device device_;
  std::optional<TokenBuckets> buckets_;
  std::future<Batch> pending_;
};

}  // namespace mpibert
