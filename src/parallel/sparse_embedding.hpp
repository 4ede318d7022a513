// Internal: ddp's exchange of the token embedding's gradient by the rows a step touched
// (data_parallel.hpp): the mask of touched rows is all-reduced as the step's last backward starts,
// and when the embedding's gradient is complete only the union's rows are all-reduced, then
// copied back once every reduction was waited for. A union above the threshold, or a step none of
// whose ids were noted, goes dense (the caller all-reduces the group whole).
#pragma once

#include <torch/torch.h>

#include <memory>
#include <optional>
#include <string>

#include "gradient_reducer.hpp"
#include "mpibert/comm/communicator.hpp"
#include "mpibert/nn/host_to_device.hpp"

namespace mpibert {

class SparseEmbedding {
 public:
  // `embedding`: the parameter whose rows the ids index; its gradient is averaged over `ranks`.
  SparseEmbedding(torch::Tensor embedding, Communicator& communicator, int ranks, double max_fraction, torch::ScalarType wire);

  // Before each micro-batch's backward: the ids it embedded.
  void note_input_ids(const torch::Tensor& input_ids);
  // As the step's last backward starts (before any other collective of it): the mask's all-reduce,
  // returned for accounting, or nothing when no ids were noted.
  std::optional<IssuedReduction> start_exchange();
  // When the embedding's gradient is complete: the union's rows all-reduced, or nothing (go dense).
  std::optional<IssuedReduction> reduce_touched_rows(const std::string& what);
  // After every reduction was waited for: the exchanged rows back into the gradient.
  void copy_rows_back();

  int64_t exchanges() const { return exchanges_; }
  int64_t dense_fallbacks() const { return dense_fallbacks_; }
  int64_t rows_exchanged() const { return rows_exchanged_; }

 private:
  torch::Tensor touched_rows();

  torch::Tensor embedding_;
  Communicator& communicator_;
  int ranks_;
  double max_fraction_;
  torch::ScalarType wire_;
  torch::Tensor touched_;                    // rows this step's micro-batches embedded: 1, else 0 ([vocab] float)
  std::shared_ptr<Work> touched_reduction_;  // the mask summed over ranks, in flight from the last backward's start
  std::optional<HostCopy> touched_on_host_;  // device-stream backends: the summed mask, on its way to the host
  torch::Tensor rows_, values_;              // the union's row indices and their gradients, being all-reduced
  int64_t exchanges_ = 0, dense_fallbacks_ = 0, rows_exchanged_ = 0;
};

}  // namespace mpibert
