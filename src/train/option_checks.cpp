#include "mpibert/train/option_checks.hpp"
#include "mpibert/text/hf_tokenizer.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <sstream>
#include <vector>

#include "mpibert/core/error.hpp"
#include "mpibert/parallel/strategies.hpp"
#include "mpibert/report/report_to.hpp"
#include "mpibert/runtime/host_collectives.hpp"
#include "mpibert/train/training_checkpoint.hpp"

namespace fs = std::filesystem;

namespace mpibert {
namespace {

// The shortest text that gives `value` back ("0.001", "24", "1e+20").
std::string shown(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

void refuse(const std::string& option, double value, const std::string& range) {
  throw InputError(describe(option, shown(value), "must be " + range));
}

// Range checks of TrainOptions' fields, each refusal naming the field as the command line spells
// it (for_each_train_option).
struct RangeChecks {
  const TrainOptions& options;

  template <class Field>
  void at_least(const Field& field, double low) const {
    const auto value = static_cast<double>(field);
    if (!std::isfinite(value) || value < low) refuse(flag(field), value, "at least " + shown(low));
  }
  template <class Field>
  void positive(const Field& field) const {
    const auto value = static_cast<double>(field);
    if (!std::isfinite(value) || value <= 0) refuse(flag(field), value, "a finite number above 0");
  }
  template <class Field>
  void within(const Field& field, double low, double high) const {
    const auto value = static_cast<double>(field);
    if (!std::isfinite(value) || value < low || value > high)
      refuse(flag(field), value, "within [" + shown(low) + ", " + shown(high) + "]");
  }
  template <class Field>
  std::string flag(const Field& field) const {
    return train_option_field(options, field).flag();
  }
};

// What an earlier run left in the run directory, for messages ("" when nothing).
std::string earlier_run_files(const std::string& output_dir) {
  std::vector<std::string> found;
  for (const char* name : {"metrics.jsonl", "results.json"})
    if (fs::exists(fs::path(output_dir) / name)) found.push_back(name);
  const auto checkpoints = checkpoints_by_step(output_dir);
  if (!checkpoints.empty()) found.push_back(fs::path(checkpoints.back()).filename().string());
  std::string list;
  for (const std::string& name : found) list += (list.empty() ? "" : ", ") + name;
  return list;
}

// "--strategy fsdp or hsdp": the strategies that read `option`.
std::string readers_of(const std::string& option) {
  std::string readers;
  for (const StrategyRow& row : strategy_table())
    if (std::find(row.reads.begin(), row.reads.end(), option) != row.reads.end())
      readers += (readers.empty() ? "--strategy " : " or ") + row.name;
  return readers;
}

// The strategy is a row of the table, and an option only some strategies read (their rows' lists)
// is set, away from its default, only for them: one rule for every such option.
void check_strategy_options(const TrainOptions& o) {
  const StrategyRow* row = find_strategy(o.parallel.strategy);
  const std::string strategy_flag = train_option_field(o, o.parallel.strategy).flag();
  if (!row) throw InputError(describe(strategy_flag, o.parallel.strategy, "not one of " + strategy_names()));
  if (o.parallel.shard_group_size < 0)
    throw InputError(describe(train_option_field(o, o.parallel.shard_group_size).flag(),
                              std::to_string(o.parallel.shard_group_size), "must be at least 0 (0: the ranks of a node)"));
  const std::vector<std::string> specific = strategy_specific_options();
  std::map<std::string, nlohmann::ordered_json> defaults;
  for_each_train_option(kDefaultTrainOptions,
                        [&](const TrainOptionField& field, const auto& value) { defaults[field.name] = option_json(value); });
  for_each_train_option(o, [&](const TrainOptionField& field, const auto& value) {
    if (std::find(specific.begin(), specific.end(), field.name) == specific.end()) return;
    if (std::find(row->reads.begin(), row->reads.end(), field.name) != row->reads.end()) return;
    const nlohmann::ordered_json given = option_json(value);
    if (given == defaults[field.name]) return;
    const std::string shown = given.is_string() ? given.get<std::string>() : given.is_boolean() ? "" : given.dump();
    throw InputError(describe(field.flag(), shown,
                              "read by " + readers_of(field.name) + " only; " + row->name +
                                  " does not read it (mpibert strategies)"));
  });
}

// "--lr-scheduler-kwargs: GIVEN: KEY: problem".
InputError refused_kwargs(const TrainOptions& o, const LrScheduleError& error) {
  return InputError(describe(train_option_field(o, o.lr_scheduler_kwargs).flag(), o.lr_scheduler_kwargs, error.what()));
}

// The schedule as --lr-scheduler-type and --lr-scheduler-kwargs give it, with any warmup and
// length: what HF's function refuses given the learning rate (polynomial's lr_end) is refused now.
void check_lr_schedule(const TrainOptions& o) {
  const LrScheduleParams params = lr_schedule_params(o);
  try {
    [[maybe_unused]] const LrSchedule schedule(params, o.learning_rate, o.warmup_steps, std::max<int64_t>(1, o.max_steps));
  } catch (const LrScheduleError& error) {
    throw refused_kwargs(o, error);
  }
}

// --eval-strategy/--save-strategy with --eval-steps/--save-steps, as HF reads them: the steps
// apply under "steps" only, so giving them with another strategy is refused rather than ignored.
void check_intervals(const TrainOptions& o) {
  const RangeChecks check{o};
  auto check_steps_apply = [&](IntervalStrategy strategy, int64_t steps, const std::string& steps_flag,
                               const std::string& strategy_flag) {
    if (strategy != IntervalStrategy::kSteps && steps > 0)
      throw InputError(describe(steps_flag, std::to_string(steps),
                                std::string("applies with ") + strategy_flag + " steps, and this run has " + strategy_flag + " " +
                                    interval_strategy_name(strategy) + ": give one of them"));
  };
  check_steps_apply(o.eval_strategy, o.eval_steps, check.flag(o.eval_steps), check.flag(o.eval_strategy));
  check_steps_apply(o.save_strategy, o.save_steps, check.flag(o.save_steps), check.flag(o.save_strategy));
  if (o.eval_steps > 0 && o.eval_dir.empty())
    throw InputError(describe(check.flag(o.eval_steps), std::to_string(o.eval_steps),
                              "evaluates on " + check.flag(o.eval_dir) + ", which is not given"));
  if (o.eval_strategy == IntervalStrategy::kEpoch && o.eval_dir.empty())
    throw InputError(describe(check.flag(o.eval_strategy), "epoch",
                              "evaluates on " + check.flag(o.eval_dir) + ", which is not given"));
}

}  // namespace

LrScheduleParams lr_schedule_params(const TrainOptions& o) {
  try {
    return parse_lr_scheduler_kwargs(o.lr_scheduler_type, o.lr_scheduler_kwargs);
  } catch (const LrScheduleError& error) {
    throw refused_kwargs(o, error);
  }
}

void check_train_options(const TrainOptions& o) {
  const RangeChecks check{o};
  check.at_least(o.batch_size, 1);
  check.at_least(o.gradient_accumulation, 1);
  check.at_least(o.eval_batch_size, 1);
  check.at_least(o.max_steps, 0);
  if (o.max_steps == 0) check.positive(o.epochs);
  check.positive(o.learning_rate);
  check.within(o.weight_decay, 0, 1);
  check.at_least(o.warmup_steps, 0);
  check.within(o.warmup_ratio, 0, 1);
  check_lr_schedule(o);
  check.at_least(o.max_grad_norm, 0);  // 0: no clipping, as HF's max_grad_norm
  check.at_least(o.logging_steps, 0);
  check.at_least(o.save_steps, 0);
  check.at_least(o.save_total_limit, 0);
  check.at_least(o.eval_steps, 0);
  check.at_least(o.stop_after_steps, 0);
  check.at_least(o.expected_max_seq_length, 0);
  check.at_least(o.expected_doc_stride, 0);
  check.at_least(o.postprocess.n_best_size, 1);
  check.at_least(o.postprocess.max_answer_length, 1);
  if (!std::isfinite(o.postprocess.null_score_diff_threshold))
    refuse(check.flag(o.postprocess.null_score_diff_threshold), o.postprocess.null_score_diff_threshold, "a finite number");
  check.positive(o.parallel.bucket_mb);
  check.at_least(o.profile_schedule.wait, 0);
  check.at_least(o.profile_schedule.warmup, 0);
  check.at_least(o.profile_schedule.active, 1);
  check.at_least(o.dataloader_num_workers, 0);
  check_intervals(o);
  check_strategy_options(o);
  parse_report_to(o.report_to, check.flag(o.report_to));
  if (o.model.autocast_bf16 && o.model.autocast_fp16)
    throw InputError(check.flag(o.model.autocast_fp16) + " and " + check.flag(o.model.autocast_bf16) + ": give one of them");
  if (o.train_dir.empty())
    throw InputError(check.flag(o.train_dir) + ": required (shards prepared by mpibert-prep --split train)");
  if (o.output_dir.empty()) throw InputError(check.flag(o.output_dir) + ": required");
}

void check_output_dir_is_free(const TrainOptions& o) {
  if (o.overwrite_output_dir && !o.resume.empty())
    throw InputError("--overwrite-output-dir replaces the run that --resume " + o.resume + " would continue: give one of them");
  if (!o.resume.empty() || o.overwrite_output_dir || !fs::exists(o.output_dir)) return;
  const std::string earlier = earlier_run_files(o.output_dir);
  if (earlier.empty()) return;
  throw InputError(describe("--output-dir", o.output_dir,
                            "holds an earlier run (" + earlier +
                                "): continue it with --resume auto, replace it with "
                                "--overwrite-output-dir (run_qa's --overwrite_output_dir), or give another directory"));
}

void require_same_on_every_rank(const nlohmann::ordered_json& description,
                                const std::function<std::string(const std::string& key)>& label) {
  const Ranks ranks = Ranks::of_world();
  if (ranks.size == 1) return;
  const std::vector<std::string> all = all_gather_strings(description.dump());
  std::ostringstream problems;
  const auto reference = nlohmann::json::parse(all[0]).flatten();
  for (size_t r = 1; r < all.size(); ++r) {
    if (all[r] == all[0]) continue;
    const auto other = nlohmann::json::parse(all[r]).flatten();
    problems << "\n  rank " << r << " differs from rank 0:";
    for (const auto& [key, value] : reference.items()) {
      if (other.contains(key) && other[key] == value) continue;
      const std::string flag = label(key.substr(1));  // flattened keys start with '/'
      problems << " " << (flag.empty() ? key : flag) << " = " << (other.contains(key) ? other[key].dump() : "(none)")
               << " (rank 0: " << value.dump() << ");";
    }
  }
  if (problems.tellp() == 0) return;
  if (ranks.root())
    throw InputError("the ranks were started with different runs; every rank must get the same options and files:" +
                     problems.str());
  throw PeerFailure("this rank's run differs from rank 0's");
}

std::function<std::string(const std::string& key)> train_option_labels(const TrainOptions& options) {
  std::map<std::string, std::string> flags;
  for_each_train_option(options, [&](const TrainOptionField& field, const auto&) { flags[field.name] = field.flag(); });
  return [flags](const std::string& key) {
    const auto found = flags.find(key);
    return found == flags.end() ? std::string() : found->second;
  };
}

void remove_earlier_run(const std::string& output_dir) {
  if (!fs::exists(output_dir)) return;
  remove_every_checkpoint(output_dir);  // a checkpoint moved aside included: nothing of it may be put back
  for (const char* name :
       {"metrics.jsonl", "results.json", "all_results.json", "train_results.json", "eval_results.json", "trainer_state.json",
        "predictions.json", "nbest_predictions.json", "null_odds.json", "eval_predictions.json", "eval_nbest_predictions.json",
        "eval_null_odds.json", "config.json", "model.safetensors", "train_config.toml", "tensorboard", "profile", "report.json"})
    fs::remove_all(fs::path(output_dir) / name);
  for (const std::string& name : tokenizer_file_names()) fs::remove_all(fs::path(output_dir) / name);
}

// mpibert-prep keeps each question's is_impossible: v2.0 data shows as questions without an
// answer in the shards, and v1.1 data has none.
void check_squad_version(const std::string& flag, bool version_2_with_negative, const std::string& dir,
                         const FeatureStore& store) {
  int64_t unanswerable = 0;
  for (int64_t e = 0; e < store.num_examples(); ++e) unanswerable += store.example(e).is_impossible ? 1 : 0;
  if (version_2_with_negative == (unanswerable > 0)) return;
  const std::string& source = store.manifest().input_path;
  const std::string shards = dir + (source.empty() ? "" : " (prepared from " + source + ")");
  if (version_2_with_negative)
    throw InputError(flag + " asks for SQuAD v2.0, but " + shards + " holds no question without an answer (SQuAD v1.1): drop " +
                     flag + " or prepare shards from v2.0 data with mpibert-prep");
  throw InputError(shards + " holds " + std::to_string(unanswerable) + " of " + std::to_string(store.num_examples()) +
                   " questions without an answer (SQuAD v2.0), and " + flag +
                   " is not given: add it (run_qa's --version_2_with_negative), or prepare shards from v1.1 data");
}

}  // namespace mpibert
