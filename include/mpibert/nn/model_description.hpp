// What a data-parallel strategy needs to know of a model, and nothing of its architecture: its
// named parameters, the units it may be sharded by, and which parameter's gradient rows are those
// of the input ids. The model layer describes its models (model_description() in bert_qa.hpp);
// the strategies (parallel/) are built from the description, as torchtitan applies parallelism to
// a model from outside.
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace mpibert {

// Called by the model around each of its units, in forward order. Sharded data parallelism
// (fsdp) gathers a unit's parameters before it runs and releases them after.
class UnitHooks {
 public:
  virtual ~UnitHooks() = default;
  virtual void before_unit(size_t unit) = 0;
  // `output` is what the unit returns; its gradient arriving marks the start of the unit's backward.
  virtual void after_unit(size_t unit, const torch::Tensor& output) = 0;
};

struct ModelDescription {
  // In registration order: the order every rank sees them in, and the reverse of the order in
  // which backward tends to finish their gradients.
  std::vector<std::pair<std::string, torch::Tensor>> parameters;
  // The units in forward order, each named by the prefix of its parameters' names; every
  // parameter belongs to exactly one.
  std::vector<std::string> unit_prefixes;
  // The parameter indexed by the input ids (a word embedding): a step's gradient is zero outside
  // the rows of the ids it embedded. Empty: none.
  std::string token_embedding;
  // Installs hooks the model calls around every unit of every forward from now on (nullptr:
  // none). The hooks are not owned; the strategy that installs them removes them before it goes.
  std::function<void(UnitHooks*)> set_unit_hooks;
};

}  // namespace mpibert
