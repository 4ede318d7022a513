// Where a run is reported besides its own files: the experiment trackers of --report-to
// (TensorBoard, MLflow, Weights & Biases), each behind one interface, composed in the order given.
//
// The run's records reach a tracker as the lines of RUN/metrics.jsonl (one per logging step and
// per evaluation), so every tracker shows the names and values of the file. Nothing here may stop or
// slow training: log() only hands a record over (a tracker that sends it over the network queues it
// for a thread of its own), and a tracker that lost its server says so at finish().
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace mpibert {

// A line of RUN/metrics.jsonl: a training step's ("step", "epoch", "loss", ...) or an evaluation's
// ("step", "epoch", "eval_f1", ...).
struct MetricRecord {
  enum class Kind { kTrain, kEval };
  Kind kind = Kind::kTrain;
  nlohmann::ordered_json line;
  int64_t step() const { return line.at("step").get<int64_t>(); }
};

// How the job ended: the run completed, stopped to be resumed (--stop-after-steps, a signal), or failed.
enum class RunEnd { kCompleted, kStopped, kFailed };
const char* run_end_name(RunEnd end);

// What a tracker is told about the run when it starts (RUN/report.json holds it, for mpibert-report).
struct RunDescription {
  std::string run_name;            // --run-name, else the run directory's name
  std::string output_dir;          // the run directory
  nlohmann::ordered_json params;   // the options under HF's names, what they resolved to, the model's config
  nlohmann::ordered_json tags;     // model family, strategy, ranks, device, version: strings
  nlohmann::ordered_json earlier;  // on a resume: the trackers' records of the earlier job (report.json's "trackers")
  int64_t metrics_offset = 0;      // bytes of RUN/metrics.jsonl before this job: its lines are the earlier job's
};

class Tracker {
 public:
  virtual ~Tracker() = default;
  virtual std::string name() const = 0;
  // What RUN/report.json keeps of this tracker ({} for none): the run a resumed job continues. Never a secret.
  virtual nlohmann::ordered_json record() const { return nlohmann::ordered_json::object(); }
  // The run directory is in place and the first step is next (a companion starts following the
  // metrics file only now: an earlier run's file replaced by --overwrite-output-dir is never read).
  virtual void start() {}
  // Hands a record over; never waits for a network.
  virtual void log(const MetricRecord& record) = 0;
  // Makes what was logged visible where that is local work (an events file); no network wait.
  virtual void flush() {}
  // The end of the job: the final results (results.json), how it ended. Returns "" when everything
  // reached the tracker, else a sentence on what did not and how to send it later. Waits a bounded time.
  virtual std::string finish(const nlohmann::ordered_json& results, RunEnd end) = 0;
};

// The trackers of one run, in --report-to's order: each record goes to each.
class Trackers {
 public:
  void add(std::unique_ptr<Tracker> tracker) { trackers_.push_back(std::move(tracker)); }
  bool empty() const { return trackers_.empty(); }
  void start();
  void log(const MetricRecord& record);
  void flush();
  // Each tracker's finish(), once; returns their sentences on what was not sent.
  std::vector<std::string> finish(const nlohmann::ordered_json& results, RunEnd end);
  // {tracker name: record} of those that keep one.
  nlohmann::ordered_json records() const;

 private:
  std::vector<std::unique_ptr<Tracker>> trackers_;
  bool finished_ = false;
};

}  // namespace mpibert
