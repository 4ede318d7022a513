// TensorBoard event files: scalar summaries, text and hyperparameters written as TFRecord-framed
// tensorflow.Event protos, and a strict reader of the scalars for tests and tools.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace mpibert {

// CRC-32C (Castagnoli), as TFRecord framing uses it.
uint32_t crc32c(std::string_view bytes);
// TFRecord's masked form, so that a CRC stored inside CRC'd data does not checksum to a constant.
uint32_t masked_crc32c(std::string_view bytes);

// Seconds since the Unix epoch, with sub-second precision.
double unix_time_now();

// Appends scalar summaries to a new events file. Records are buffered; flush() makes them visible
// to a running TensorBoard. Not thread-safe: one writer per thread (in practice, rank 0 only).
class TensorBoardWriter {
 public:
  // Creates `log_dir` (and parents) if needed and opens a new
  // events.out.tfevents.<unix seconds>.<hostname>.<pid>.<n> in it, starting with the
  // file_version record. Throws InputError naming the path on failure.
  explicit TensorBoardWriter(const std::string& log_dir);
  TensorBoardWriter(TensorBoardWriter&&) noexcept = default;
  TensorBoardWriter& operator=(TensorBoardWriter&&) noexcept = default;
  ~TensorBoardWriter();  // flushes and closes; never throws

  // The value is stored as a float (TensorBoard's simple_value). Throws InputError on a write failure.
  void add_scalar(const std::string& tag, double value, int64_t step, double wall_time_seconds = unix_time_now());
  // Text for TensorBoard's text plugin under `tag` + "/text_summary", as torch's
  // SummaryWriter.add_text stores it (a one-element string tensor).
  void add_text(const std::string& tag, const std::string& text, int64_t step = 0, double wall_time_seconds = unix_time_now());
  // The run's hyperparameters for the hparams plugin: its session start info, as torch's
  // add_hparams and Lightning's log_hyperparams write it (tag "_hparams_/session_start_info").
  using HParam = std::variant<double, std::string, bool>;
  void add_hparams(const std::map<std::string, HParam>& hparams, double wall_time_seconds = unix_time_now());
  void flush();  // fflush (no fsync); throws InputError naming the path on failure
  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& data);

  struct FileCloser {
    void operator()(std::FILE* file) const { std::fclose(file); }
  };
  std::string path_;
  std::unique_ptr<std::FILE, FileCloser> file_;
};

struct ScalarEvent {
  int64_t step;
  double wall_time;
  std::string tag;
  float value;
};

// Reads every scalar summary of an events file, in file order, verifying both CRCs of every
// record. Stores the file_version record's value in `*file_version` when given. A bad CRC, a
// truncated record or an unparsable Event is an InputError naming the file and the record index.
std::vector<ScalarEvent> read_tensorboard_scalars(const std::string& path, std::string* file_version = nullptr);

}  // namespace mpibert
