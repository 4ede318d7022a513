// The data-parallel strategies, one row each: the name --strategy takes, the line its help gives,
// what a rank holds between steps (the README's strategy table is made from these and checked
// against them), which options it reads, and its factory. The command line's choices and help,
// the option checks, the trainer and the docs read this table; a new strategy is a row
// (src/parallel/strategies.cpp) and a file of its own.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "mpibert/parallel/data_parallel.hpp"

namespace mpibert {

using MakeDataParallel =
    std::function<std::unique_ptr<DataParallel>(const ModelDescription& model, std::shared_ptr<Communicator> communicator,
                                                const AdamWOptions& adam, const DataParallelOptions& options)>;

struct StrategyRow {
  std::string name;         // --strategy's value
  std::string known_as;     // what users of other stacks call it ("ZeRO-1"), "" for none
  std::string description;  // one line: how it reduces and what it shards
  // What a rank holds between steps: "whole", "1/N", ... (N: the ranks it shards over).
  std::string parameters, gradients, optimizer_state;
  std::string pick_it_when;
  // The options only some strategies read that this one does, by their TrainOptions names
  // ("param_dtype"): one of them set for a strategy whose row does not list it is refused
  // (option_checks.hpp), by one rule for all of them.
  std::vector<std::string> reads;
  MakeDataParallel make;
};

// In the order --help and the docs list them; the first is the default.
const std::vector<StrategyRow>& strategy_table();
// The row of `name`, or null.
const StrategyRow* find_strategy(const std::string& name);
// Every option some strategy reads (the rows' `reads`, each once, in the table's order).
std::vector<std::string> strategy_specific_options();
// "ddp, zero1, zero2, fsdp, hsdp".
std::string strategy_names();
// The README's table: | strategy | parameters | gradients | AdamW state | pick it when |.
std::string strategy_table_markdown();

}  // namespace mpibert
