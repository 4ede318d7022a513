// Weights & Biases through its own SDK, in a companion process: `mpibert-report wandb RUN_DIR
// --follow` (the tools package, tools/mpibert_tools/report.py), started next to rank 0. It is told
// the run's description on its standard input, answers one line once its W&B run is open (or why
// not), then follows RUN/metrics.jsonl as the trainer appends to it, live where the node has a
// network or offline (WANDB_MODE=offline) for `wandb sync` later. At the end the trainer writes
// "end" with how the run ended and closes the pipe; a trainer that dies closes it too, and the
// companion marks the W&B run as crashed. The companion runs at a lower priority than training.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mpibert/report/tracker.hpp"

namespace mpibert {

// The companion's command: MPIBERT_REPORT (a command line, words split on blanks), else
// mpibert-report on PATH, else the checkout's tools/report launcher beside a build tree's
// `program` (BUILD/bin/mpibert); nullopt when there is none.
std::optional<std::vector<std::string>> find_companion(const std::string& program);

// Starts the companion for `run` and waits for its W&B run to open. `required` (--report-to named
// wandb): a companion that cannot report is refused (InputError, with its reason); otherwise (all)
// a companion without the wandb package gives nullptr, as HF's "all" leaves out what is not installed.
std::unique_ptr<Tracker> start_wandb_companion(const std::vector<std::string>& command, const RunDescription& run, bool required);

}  // namespace mpibert
