// TensorBoard event files: scalar summaries written as TFRecord-framed tensorflow.Event protos,
// and a strict reader for tests and tools.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
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
