// The table of strategies (strategies.hpp): one row each, its factory in a file of its own.
#include "mpibert/parallel/strategies.hpp"

#include <algorithm>
#include <stdexcept>

namespace mpibert {

// The factories, each in its strategy's file.
std::unique_ptr<DataParallel> make_single_process(const ModelDescription& model, const AdamWOptions& adam);
std::unique_ptr<DataParallel> make_ddp(const ModelDescription& model, std::shared_ptr<Communicator> communicator,
                                       const AdamWOptions& adam, const DataParallelOptions& options);
std::unique_ptr<DataParallel> make_zero(int stage, const ModelDescription& model, std::shared_ptr<Communicator> communicator,
                                        const AdamWOptions& adam, const DataParallelOptions& options);
std::unique_ptr<DataParallel> make_fsdp(const ModelDescription& model, std::shared_ptr<Communicator> communicator,
                                        const AdamWOptions& adam, const DataParallelOptions& options);
std::unique_ptr<DataParallel> make_hsdp(const ModelDescription& model, std::shared_ptr<Communicator> communicator,
                                        const AdamWOptions& adam, const DataParallelOptions& options);

namespace {

MakeDataParallel zero_stage(int stage) {
  return [stage](const ModelDescription& model, std::shared_ptr<Communicator> communicator, const AdamWOptions& adam,
                 const DataParallelOptions& options) { return make_zero(stage, model, std::move(communicator), adam, options); };
}

std::vector<StrategyRow> make_table() {
  std::vector<StrategyRow> rows;
  StrategyRow& ddp = rows.emplace_back();
  ddp.name = "ddp";
  ddp.description = "gradients all-reduced in buckets during backward (PyTorch's DDP)";
  ddp.parameters = ddp.gradients = ddp.optimizer_state = "whole";
  ddp.pick_it_when =
      "the model, its gradients and AdamW state fit on each device; gradients are all-reduced in buckets during backward";
  ddp.reads = {"embedding_exchange"};
  ddp.make = make_ddp;

  StrategyRow& zero1 = rows.emplace_back();
  zero1.name = "zero1";
  zero1.known_as = "ZeRO-1";
  zero1.description = "buckets reduce-scattered, AdamW state sharded, parameters all-gathered after the step";
  zero1.parameters = zero1.gradients = "whole";
  zero1.optimizer_state = "1/N";
  zero1.pick_it_when = "the AdamW state (two floats per parameter) is what does not fit";
  zero1.make = zero_stage(1);

  StrategyRow& zero2 = rows.emplace_back();
  zero2.name = "zero2";
  zero2.known_as = "ZeRO-2";
  zero2.description = "as zero1, and a bucket's full gradient freed once reduce-scattered";
  zero2.parameters = "whole";
  zero2.gradients = "1/N (a bucket whole only until it is reduce-scattered)";
  zero2.optimizer_state = "1/N";
  zero2.pick_it_when = "as zero1, and the peak during backward matters";
  zero2.make = zero_stage(2);

  StrategyRow& fsdp = rows.emplace_back();
  fsdp.name = "fsdp";
  fsdp.known_as = "ZeRO-3, FSDP `FULL_SHARD`";
  fsdp.description = "parameters sharded too, each unit gathered for its forward and its backward";
  fsdp.parameters = "1/N (a unit gathered while it runs)";
  fsdp.gradients = fsdp.optimizer_state = "1/N";
  fsdp.pick_it_when = "the parameters themselves do not fit; it gathers every unit for forward and again for backward";
  fsdp.reads = {"param_dtype", "keep_gathered_for_backward"};
  fsdp.make = make_fsdp;

  StrategyRow& hsdp = rows.emplace_back();
  hsdp.name = "hsdp";
  hsdp.known_as = "FSDP `HYBRID_SHARD`, ZeRO++ hpZ";
  hsdp.description =
      "fsdp inside a shard group of --shard-group-size ranks (default: a node), replicated across the groups: only an "
      "all-reduce of each rank's 1/G of the gradients crosses between groups";
  hsdp.parameters = "1/G (a unit gathered inside the group while it runs)";
  hsdp.gradients = hsdp.optimizer_state = "1/G";
  hsdp.pick_it_when =
      "fsdp's memory is needed and the job spans nodes: the slow links between nodes carry one all-reduce of 1/G of the "
      "gradients per rank, the gathers stay inside a node";
  hsdp.reads = {"param_dtype", "keep_gathered_for_backward", "shard_group_size"};
  hsdp.make = make_hsdp;
  return rows;
}

}  // namespace

const std::vector<StrategyRow>& strategy_table() {
  static const std::vector<StrategyRow> table = make_table();
  return table;
}

const StrategyRow* find_strategy(const std::string& name) {
  for (const StrategyRow& row : strategy_table())
    if (row.name == name) return &row;
  return nullptr;
}

std::vector<std::string> strategy_specific_options() {
  std::vector<std::string> options;
  for (const StrategyRow& row : strategy_table())
    for (const std::string& option : row.reads)
      if (std::find(options.begin(), options.end(), option) == options.end()) options.push_back(option);
  return options;
}

std::string strategy_names() {
  std::string names;
  for (const StrategyRow& row : strategy_table()) names += (names.empty() ? "" : ", ") + row.name;
  return names;
}

std::string strategy_table_markdown() {
  std::string table =
      "| strategy | parameters | gradients | AdamW state | pick it when |\n"
      "|---|---|---|---|---|\n";
  for (const StrategyRow& row : strategy_table()) {
    std::string name = "`" + row.name + "`";
    if (&row == &strategy_table().front()) name += " (default)";
    if (!row.known_as.empty()) name += " (" + row.known_as + ")";
    table += "| " + name + " | " + row.parameters + " | " + row.gradients + " | " + row.optimizer_state + " | " +
             row.pick_it_when + " |\n";
  }
  return table;
}

std::unique_ptr<DataParallel> make_data_parallel(const ModelDescription& model, std::shared_ptr<Communicator> communicator,
                                                 const AdamWOptions& adam, const DataParallelOptions& options) {
  if (!communicator) return make_single_process(model, adam);
  const StrategyRow* row = find_strategy(options.strategy);
  if (!row) throw std::invalid_argument("no strategy " + options.strategy + " (" + strategy_names() + ")");
  return row->make(model, std::move(communicator), adam, options);
}

}  // namespace mpibert
