#include "mpibert/report/wandb_companion.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <thread>

#include "mpibert/core/error.hpp"

extern char** environ;

namespace mpibert {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// How long the companion may take to open its W&B run (wandb.init's own limit is WANDB_INIT_TIMEOUT,
// 90 s by default) and to finish it at the end.
std::chrono::seconds open_time() {
  const char* init_timeout = std::getenv("WANDB_INIT_TIMEOUT");
  const long seconds = init_timeout ? std::strtol(init_timeout, nullptr, 10) : 90;
  return std::chrono::seconds(std::max(30L, seconds + 30));
}
constexpr std::chrono::seconds kCompanionFinishTime{120};

// A child process whose standard input and output are pipes to this one.
class Child {
 public:
  explicit Child(const std::vector<std::string>& argv) {
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) throw std::runtime_error(std::strerror(errno));
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, in[0], 0);
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
    posix_spawn_file_actions_addclosefrom_np(&actions, 3);  // MPI's sockets stay with the rank (the companion closes them too)
#endif
    std::vector<char*> args;
    for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
    args.push_back(nullptr);
    const int failed = posix_spawnp(&pid_, args[0], &actions, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    close(in[0]);
    close(out[1]);
    to_child_ = in[1];
    from_child_ = out[0];
    if (failed != 0) {
      pid_ = -1;
      throw std::runtime_error(argv[0] + ": " + std::strerror(failed));
    }
  }
  ~Child() {
    close_input();
    if (from_child_ >= 0) close(from_child_);
    if (pid_ > 0 && !exit_status_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }

  // A line the child wrote, or nullopt when it closed its output (`closed` set) or the time ran out.
  std::optional<std::string> read_line(std::chrono::seconds time_left, bool& closed) {
    closed = false;
    const auto deadline = Clock::now() + time_left;
    std::string line;
    while (Clock::now() < deadline) {
      pollfd ready{from_child_, POLLIN, 0};
      const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (poll(&ready, 1, static_cast<int>(std::max<long long>(1, wait))) <= 0) continue;
      char c;
      const ssize_t got = read(from_child_, &c, 1);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        closed = true;
        return std::nullopt;
      }
      if (c == '\n') return line;
      line += c;
    }
    return std::nullopt;
  }

  // Writes all of `text`; false when the child is gone (no SIGPIPE reaches this process).
  bool write_all(const std::string& text) {
    if (to_child_ < 0) return false;
    sigset_t pipe_signal, previous;
    sigemptyset(&pipe_signal);
    sigaddset(&pipe_signal, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_signal, &previous);
    size_t done = 0;
    bool ok = true;
    while (done < text.size()) {
      const ssize_t wrote = write(to_child_, text.data() + done, text.size() - done);
      if (wrote < 0 && errno == EINTR) continue;
      if (wrote <= 0) {
        ok = false;
        break;
      }
      done += static_cast<size_t>(wrote);
    }
    if (!ok && errno == EPIPE) {  // take the pending SIGPIPE before unblocking it
      const timespec none{0, 0};
      sigtimedwait(&pipe_signal, nullptr, &none);
    }
    pthread_sigmask(SIG_SETMASK, &previous, nullptr);
    return ok;
  }

  void close_input() {
    if (to_child_ >= 0) close(to_child_);
    to_child_ = -1;
  }

  // The child's exit status once it exits within `time_left`; nullopt if it is still running.
  std::optional<int> wait(std::chrono::seconds time_left) {
    const auto deadline = Clock::now() + time_left;
    while (!exit_status_) {
      int status = 0;
      const pid_t done = waitpid(pid_, &status, WNOHANG);
      if (done == pid_) exit_status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      if (done < 0) exit_status_ = -1;
      if (exit_status_ || Clock::now() >= deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return exit_status_;
  }

  void signal(int number) const {
    if (pid_ > 0 && !exit_status_) kill(pid_, number);
  }

 private:
  pid_t pid_ = -1;
  int to_child_ = -1, from_child_ = -1;
  std::optional<int> exit_status_;
};

class WandbCompanion : public Tracker {
 public:
  WandbCompanion(std::unique_ptr<Child> child, nlohmann::ordered_json record)
      : child_(std::move(child)), record_(std::move(record)) {}
  ~WandbCompanion() override {
    if (!finished_) finish(nlohmann::ordered_json::object(), RunEnd::kFailed);
  }
  std::string name() const override { return "wandb"; }
  nlohmann::ordered_json record() const override { return record_; }
  void start() override { child_->write_all("follow\n"); }
  void log(const MetricRecord&) override {}  // the companion follows RUN/metrics.jsonl itself
  std::string finish(const nlohmann::ordered_json&, RunEnd end) override {
    finished_ = true;
    child_->write_all(std::string("end ") + run_end_name(end) + "\n");
    child_->close_input();
    // A failed job does not wait long: its failure must reach the other ranks promptly.
    std::optional<int> status = child_->wait(end == RunEnd::kFailed ? std::chrono::seconds(10) : kCompanionFinishTime);
    if (!status) {
      child_->signal(SIGTERM);
      status = child_->wait(std::chrono::seconds(10));
    }
    record_["companion_exit_status"] = status ? *status : -1;
    if (status && *status == 0) return "";
    return "wandb: the companion (mpibert-report wandb) " +
           (status ? "ended with status " + std::to_string(*status) : std::string("did not finish in time and was stopped")) +
           " (its messages are above): send the run with `mpibert-report wandb RUN_DIR`";
  }

 private:
  std::unique_ptr<Child> child_;
  nlohmann::ordered_json record_;
  bool finished_ = false;
};

std::vector<std::string> split_words(const std::string& text) {
  std::istringstream words(text);
  std::vector<std::string> argv;
  for (std::string word; words >> word;) argv.push_back(word);
  return argv;
}

}  // namespace

std::optional<std::vector<std::string>> find_companion(const std::string& program) {
  if (const char* command = std::getenv("MPIBERT_REPORT"); command && *command) return split_words(command);
  if (const char* path = std::getenv("PATH"))
    for (std::istringstream dirs(path); !dirs.eof();) {
      std::string dir;
      std::getline(dirs, dir, ':');
      const fs::path candidate = fs::path(dir.empty() ? "." : dir) / "mpibert-report";
      if (access(candidate.c_str(), X_OK) == 0) return std::vector<std::string>{candidate.string()};
    }
  std::error_code error;
  const fs::path launcher = fs::weakly_canonical(fs::path(program), error).parent_path().parent_path().parent_path() /
                            "tools/report";
  if (!error && access(launcher.c_str(), X_OK) == 0) return std::vector<std::string>{launcher.string()};
  return std::nullopt;
}

std::unique_ptr<Tracker> start_wandb_companion(const std::vector<std::string>& command, const RunDescription& run,
                                               bool required) {
  std::vector<std::string> argv = command;
  for (const char* arg : {"wandb", run.output_dir.c_str(), "--follow"}) argv.emplace_back(arg);
  std::unique_ptr<Child> child;
  try {
    child = std::make_unique<Child>(argv);
  } catch (const std::exception& error) {
    throw InputError(std::string("--report-to wandb: cannot start the companion: ") + error.what() +
                     " (MPIBERT_REPORT, or mpibert-report on PATH: pip install ./tools[trackers])");
  }
  const nlohmann::ordered_json start = {{"run_name", run.run_name},
                                        {"params", run.params},
                                        {"tags", run.tags},
                                        {"earlier", run.earlier.is_object() ? run.earlier : nlohmann::ordered_json::object()},
                                        {"metrics_offset", run.metrics_offset}};
  child->write_all(start.dump() + "\n");
  bool closed = false;
  const std::optional<std::string> line = child->read_line(open_time(), closed);
  const nlohmann::json answer = line ? nlohmann::json::parse(*line, nullptr, false) : nlohmann::json();
  const std::string status = answer.is_object() ? answer.value("status", "") : "";
  if (status == "ready") {
    spdlog::info("wandb: {}", answer.value("message", "reporting"));
    return std::make_unique<WandbCompanion>(std::move(child), answer.value("record", nlohmann::ordered_json::object()));
  }
  const std::string why = answer.is_object() ? answer.value("message", *line)
                          : line             ? "it answered " + quote_excerpt(*line)
                          : closed           ? std::string("it ended without an answer (its messages are above)")
                                             : "it gave no answer in " + std::to_string(open_time().count()) + " s";
  if (!required && status == "unavailable") {
    spdlog::info("--report-to all: not reporting to W&B: {}", why);
    return nullptr;
  }
  throw InputError("--report-to wandb: the companion (" + command.front() + ") cannot report this run: " + why);
}

}  // namespace mpibert
