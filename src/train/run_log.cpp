#include "mpibert/train/run_log.hpp"

#include <mpi.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <thread>

#include "mpibert/comm/communicator.hpp"
#include "mpibert/core/error.hpp"
#include "mpibert/core/io.hpp"
#include "mpibert/core/process.hpp"
#include "mpibert/data/shards.hpp"
#include "mpibert/runtime/device.hpp"
#include "mpibert/runtime/host_collectives.hpp"
#include "mpibert/runtime/open_mpi_settings.hpp"

namespace mpibert {
namespace {

// "model name" from /proc/cpuinfo, for the run record ("" where there is none).
std::string cpu_model() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);)
    if (line.rfind("model name", 0) == 0)
      if (auto colon = line.find(':'); colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
  return "";
}

std::string mpi_library_version() {
  char version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  MPI_Get_library_version(version, &length);
  std::string mpi(version, static_cast<size_t>(length));
  if (auto comma = mpi.find(','); comma != std::string::npos) mpi.resize(comma);
  return mpi;
}

}  // namespace

RunLog::RunLog(const std::string& output_dir, bool writer, int world_size, Trackers trackers, torch::Device device)
    : output_dir_(output_dir), writer_(writer), world_size_(world_size), device_(device), trackers_(std::move(trackers)) {
  if (!writer_) return;
  const std::string path = output_dir + "/metrics.jsonl";
  metrics_.reset(std::fopen(path.c_str(), "a"));
  if (!metrics_) throw InputError(describe(path, "", std::string("cannot open for appending: ") + std::strerror(errno)));
}

void RunLog::add_step(StepRecord record, double step_time, double samples_per_second) {
  auto check = [&](const torch::Tensor& value, const std::string& what) {
    if (!value.defined() || value.device() != device_)
      throw std::logic_error("step " + std::to_string(record.step) + ": its " + what + " is " +
                             (value.defined() ? "on " + value.device().str() : "missing") + ", the run's values on " +
                             device_.str() + ": one copy reads them all only from one device");
  };
  for (size_t m = 0; m < record.losses.size(); ++m) check(record.losses[m], "loss of micro-batch " + std::to_string(m));
  check(record.grad_norm, "grad_norm");
  pending_.push_back({std::move(record), step_time, samples_per_second});
}

std::vector<LoggedStep> RunLog::flush_steps() {
  std::vector<LoggedStep> logged;
  if (pending_.empty()) return logged;
  // One copy from the device for all kept values: the micro-batch losses, then the norms.
  std::vector<torch::Tensor> values;
  for (const Pending& p : pending_) values.insert(values.end(), p.record.losses.begin(), p.record.losses.end());
  for (const Pending& p : pending_) values.push_back(p.record.grad_norm);
  const torch::Tensor host = torch::stack(values).to(torch::kCPU, torch::kDouble);
  const double* read = host.data_ptr<double>();
  std::vector<double> losses;
  for (const Pending& p : pending_) {
    double loss = 0;  // summed in double, micro-batch by micro-batch
    for (size_t m = 0; m < p.record.losses.size(); ++m) loss += *read++;
    losses.push_back(loss);
  }
  if (world_size_ > 1) losses = sum_over_ranks(std::move(losses), "the steps' losses");
  for (size_t i = 0; i < pending_.size(); ++i) {
    const Pending& p = pending_[i];
    LoggedStep step{
        p.record.step, p.record.epoch,   losses[i] / world_size_, *read++,         p.record.learning_rate, p.samples_per_second,
        p.step_time,   p.record.seconds, p.record.loss_scale,     p.record.skipped};
    nlohmann::ordered_json line = {{"step", step.step},           {"epoch", step.epoch},
                                   {"loss", step.loss},           {"learning_rate", step.learning_rate},
                                   {"grad_norm", step.grad_norm}, {"samples_per_second", step.samples_per_second},
                                   {"step_time", step.step_time}, {"seconds", step.seconds}};
    if (step.loss_scale) {
      line["loss_scale"] = *step.loss_scale;
      line["skipped"] = step.skipped;
    }
    write_metrics_line(line, MetricRecord::Kind::kTrain);
    logged.push_back(step);
  }
  pending_.clear();
  return logged;
}

nlohmann::ordered_json eval_metrics_as_hf(const EvalResult& result, int world_size) {
  nlohmann::ordered_json metrics;
  for (const auto& [key, value] : result.metrics.items()) metrics["eval_" + key] = value;
  metrics["eval_loss"] = result.loss;
  metrics["eval_runtime"] = result.seconds;
  metrics["eval_samples_per_second"] = static_cast<double>(result.samples) / result.seconds;
  // HF counts the steps of one process: the batches split over the ranks.
  const int64_t steps_per_rank = (result.batches + world_size - 1) / world_size;
  metrics["eval_steps_per_second"] = static_cast<double>(steps_per_rank) / result.seconds;
  return metrics;
}

void RunLog::add_evaluation(int64_t step, double epoch, const EvalResult& result) {
  nlohmann::ordered_json line = {{"step", step}, {"epoch", epoch}};
  line.update(eval_metrics_as_hf(result, world_size_));
  write_metrics_line(line, MetricRecord::Kind::kEval);
}

void RunLog::flush_trackers() { trackers_.flush(); }

std::vector<std::string> RunLog::finish_trackers(const nlohmann::ordered_json& results, RunEnd end) {
  return trackers_.finish(results, end);
}

void RunLog::write_results(const nlohmann::ordered_json& results) const {
  if (writer_) write_file_atomic(output_dir_ + "/results.json", results.dump(2) + "\n");
}

// The line into metrics.jsonl first (the trackers' companion follows the file), then to the trackers.
void RunLog::write_metrics_line(const nlohmann::ordered_json& line, MetricRecord::Kind kind) {
  if (!metrics_) return;
  const std::string text = line.dump() + "\n";
  if (std::fwrite(text.data(), 1, text.size(), metrics_.get()) != text.size() || std::fflush(metrics_.get()) != 0)
    throw InputError(describe(output_dir_ + "/metrics.jsonl", "", std::string("write failed: ") + std::strerror(errno)));
  trackers_.log({kind, line});
}

std::string mpibert_git_commit() { return MPIBERT_GIT_COMMIT; }

std::string mpibert_version_text() { return std::string("mpibert ") + MPIBERT_VERSION + " (git " + MPIBERT_GIT_COMMIT + ")"; }

namespace {

// Where each Open MPI setting mpibert cares for came from (runtime/open_mpi_settings.hpp).
nlohmann::ordered_json open_mpi_settings_json() {
  nlohmann::ordered_json settings = nlohmann::ordered_json::object();
  for (const OpenMpiSetting& setting : open_mpi_settings())
    settings[setting.name] = {{"value", setting.value}, {"source", setting.source}};
  return settings;
}

}  // namespace

nlohmann::ordered_json run_environment(int world_size, const std::string& communication, const torch::Device& device) {
  const char* slurm_job = std::getenv("SLURM_JOB_ID");
  const std::string nccl = nccl_version();
  nlohmann::ordered_json devices = describe_device(device);
  if (device.is_cuda()) devices["nccl"] = nccl;
  return {{"host", host_name()},
          {"world_size", world_size},
          {"devices", devices},
          {"cpu_model", cpu_model()},
          {"cpus_online", std::thread::hardware_concurrency()},
          {"communication", communication},
          {"torch_threads", torch::get_num_threads()},
          {"libtorch", TORCH_VERSION},
          {"mpi", mpi_library_version()},
          {"open_mpi_settings", open_mpi_settings_json()},
          {"hdf5", hdf5_library_version()},
          {"nccl", nccl.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(nccl)},
          {"slurm_job_id", slurm_job ? nlohmann::ordered_json(slurm_job) : nlohmann::ordered_json()},
          {"git_commit", MPIBERT_GIT_COMMIT},
          {"mpibert", MPIBERT_VERSION}};
}

}  // namespace mpibert
