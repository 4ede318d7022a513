// Every option of `mpibert train` checked in one place, before any work and before anything is
// written: a value out of range is an InputError naming the option as the user spells it and the
// range it must lie in (a batch of 0 would divide by zero an hour later; a ratio of 1.5 would
// train with a schedule nobody asked for). What depends on the data (an epoch shorter than an
// accumulation window, eval shards of another vocabulary or sequence length) is checked by the
// trainer as it opens the shards, still before anything is written. The trainer calls these first
// in its setup, where the ranks agree on failures (one rank reports).
#pragma once

#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "mpibert/data/shards.hpp"
#include "mpibert/train/train_options.hpp"

namespace mpibert {

void check_train_options(const TrainOptions& options);

// The schedule's parameters from --lr-scheduler-type and --lr-scheduler-kwargs
// (parse_lr_scheduler_kwargs); an InputError naming --lr-scheduler-kwargs, what was given and the
// key at fault when they do not work.
LrScheduleParams lr_schedule_params(const TrainOptions& options);

// The run directory holds an earlier run (its metrics.jsonl, results.json or a checkpoint), and
// this one neither continues it (--resume) nor replaces it (--overwrite-output-dir): an
// InputError saying which (and one for asking both). Mixing two runs' records in one directory
// would make both unreadable.
void check_output_dir_is_free(const TrainOptions& options);

// `flag` (--version-2-with-negative, run_qa's --version_2_with_negative: SQuAD v2.0, questions may
// have no answer) against the shards in `dir`: given, they must hold a question without an answer;
// not given, none. A mismatch is an InputError naming the option, the shards and their source.
void check_squad_version(const std::string& flag, bool version_2_with_negative, const std::string& dir,
                         const FeatureStore& store);

// What every rank must share before working together, as JSON (the options that decide when a
// collective runs, the files by their digests, ...), against rank 0's: each rank that differs is
// named with every entry that differs, spelled by `label` (an option's flag for its key; the key
// itself when `label` gives ""). Rank 0 throws the InputError, the others a PeerFailure.
// Collective: every rank calls it.
void require_same_on_every_rank(const nlohmann::ordered_json& description,
                                const std::function<std::string(const std::string& key)>& label);

// The run description of `mpibert train`: every field for_each_train_option marks kDescribed, by
// its name (labelled by its flag), beside the digests of the files.
std::function<std::string(const std::string& key)> train_option_labels(const TrainOptions& options);

// --overwrite-output-dir: removes what an earlier run wrote into the run directory (its
// checkpoints, records, predictions, TensorBoard events, profile and final model), nothing else.
void remove_earlier_run(const std::string& output_dir);

}  // namespace mpibert
