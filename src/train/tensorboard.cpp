#include "mpibert/train/tensorboard.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "mpibert/core/error.hpp"
#include "mpibert/core/io.hpp"
#include "mpibert/core/process.hpp"
#include "tensorboard_event.pb.h"

namespace mpibert {
namespace {

constexpr char kFileVersion[] = "brain.Event:2";  // what TensorBoard expects in the first record
constexpr size_t kHeaderBytes = 12;               // uint64 length + uint32 masked CRC of it
constexpr size_t kFooterBytes = 4;                // uint32 masked CRC of the data
constexpr int kDtString = 7;                      // TF's DataType DT_STRING

std::array<uint32_t, 256> make_crc32c_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t byte = 0; byte < 256; ++byte) {
    uint32_t crc = byte;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (crc & 1 ? 0x82F63B78u : 0u);  // reflected Castagnoli
    table[byte] = crc;
  }
  return table;
}

// TFRecord integers are little-endian whatever the host; build them byte by byte.
void append_le(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
}

uint64_t load_le(const std::string& in, size_t offset, int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) value |= uint64_t{static_cast<unsigned char>(in[offset + i])} << (8 * i);
  return value;
}

std::string serialize(const tensorboard::Event& event) {
  std::string data;
  if (!event.SerializeToString(&data)) throw std::logic_error("tensorboard: cannot serialize an Event");
  return data;
}

}  // namespace

uint32_t crc32c(std::string_view bytes) {
  static const std::array<uint32_t, 256> table = make_crc32c_table();
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char c : bytes) crc = table[(crc ^ c) & 0xFF] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(std::string_view bytes) {
  const uint32_t crc = crc32c(bytes);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

double unix_time_now() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

TensorBoardWriter::TensorBoardWriter(const std::string& log_dir) {
  std::error_code error;
  std::filesystem::create_directories(log_dir, error);
  if (error) throw InputError(describe(log_dir, "", "cannot create the log directory: " + error.message()));

  // The name must contain "tfevents" for TensorBoard to pick it up; pid and a per-process counter
  // keep writers started in the same second apart, and O_EXCL guarantees we never append to
  // another writer's file.
  static std::atomic<int> writers_opened{0};
  const double now = unix_time_now();
  const std::string prefix = log_dir + "/events.out.tfevents." + std::to_string(static_cast<int64_t>(now)) + "." + host_name() +
                             "." + std::to_string(getpid()) + ".";
  int fd = -1;
  do {
    path_ = prefix + std::to_string(writers_opened++);
    fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  } while (fd < 0 && errno == EEXIST);
  if (fd < 0) throw InputError(describe(path_, "", std::string("cannot create the events file: ") + std::strerror(errno)));
  file_.reset(fdopen(fd, "wb"));
  if (!file_) {
    ::close(fd);
    throw InputError(describe(path_, "", std::string("cannot open the events file: ") + std::strerror(errno)));
  }

  tensorboard::Event event;
  event.set_wall_time(now);
  event.set_file_version(kFileVersion);
  write_record(serialize(event));
  flush();  // so that TensorBoard sees a valid (if empty) run at once
}

TensorBoardWriter::~TensorBoardWriter() = default;  // fclose flushes; errors at exit are not reportable

void TensorBoardWriter::add_scalar(const std::string& tag, double value, int64_t step, double wall_time_seconds) {
  tensorboard::Event event;
  event.set_wall_time(wall_time_seconds);
  event.set_step(step);
  tensorboard::Summary::Value* summary_value = event.mutable_summary()->add_value();
  summary_value->set_tag(tag);
  summary_value->set_simple_value(static_cast<float>(value));
  write_record(serialize(event));
}

void TensorBoardWriter::add_text(const std::string& tag, const std::string& text, int64_t step, double wall_time_seconds) {
  tensorboard::Event event;
  event.set_wall_time(wall_time_seconds);
  event.set_step(step);
  tensorboard::Summary::Value* value = event.mutable_summary()->add_value();
  value->set_tag(tag + "/text_summary");
  value->mutable_metadata()->mutable_plugin_data()->set_plugin_name("text");
  tensorboard::TensorProto* tensor = value->mutable_tensor();
  tensor->set_dtype(kDtString);
  tensor->mutable_tensor_shape()->add_dim()->set_size(1);
  tensor->add_string_val(text);
  write_record(serialize(event));
}

void TensorBoardWriter::add_hparams(const std::map<std::string, HParam>& hparams, double wall_time_seconds) {
  tensorboard::HParamsPluginData data;
  tensorboard::SessionStartInfo* session = data.mutable_session_start_info();
  session->set_start_time_secs(wall_time_seconds);
  for (const auto& [name, hparam] : hparams) {
    tensorboard::HParamValue& value = (*session->mutable_hparams())[name];
    if (const auto* number = std::get_if<double>(&hparam))
      value.set_number_value(*number);
    else if (const auto* text = std::get_if<std::string>(&hparam))
      value.set_string_value(*text);
    else
      value.set_bool_value(std::get<bool>(hparam));
  }
  tensorboard::Event event;
  event.set_wall_time(wall_time_seconds);
  // The plugin reads the metadata alone: the value carries no data, as in torch's hparams().
  tensorboard::Summary::Value* value = event.mutable_summary()->add_value();
  value->set_tag("_hparams_/session_start_info");
  tensorboard::SummaryMetadata::PluginData* plugin = value->mutable_metadata()->mutable_plugin_data();
  plugin->set_plugin_name("hparams");
  std::string content;
  if (!data.SerializeToString(&content)) throw std::logic_error("tensorboard: cannot serialize the hparams");
  plugin->set_content(content);
  write_record(serialize(event));
}

void TensorBoardWriter::flush() {
  if (std::fflush(file_.get()) != 0) throw InputError(describe(path_, "", std::string("cannot write: ") + std::strerror(errno)));
}

// TFRecord framing: uint64 length, masked CRC of those 8 bytes, data, masked CRC of the data.
void TensorBoardWriter::write_record(const std::string& data) {
  std::string record;
  record.reserve(kHeaderBytes + data.size() + kFooterBytes);
  append_le(record, data.size(), 8);
  append_le(record, masked_crc32c(record), 4);
  record += data;
  append_le(record, masked_crc32c(data), 4);
  if (std::fwrite(record.data(), 1, record.size(), file_.get()) != record.size())
    throw InputError(describe(path_, "", std::string("cannot write: ") + std::strerror(errno)));
}

std::vector<ScalarEvent> read_tensorboard_scalars(const std::string& path, std::string* file_version) {
  const std::string bytes = read_file_bytes(path);
  std::vector<ScalarEvent> scalars;
  size_t offset = 0;
  for (size_t index = 0; offset < bytes.size(); ++index) {
    const std::string record_name = "record " + std::to_string(index) + " (byte " + std::to_string(offset) + ")";
    auto fail = [&](const std::string& problem) { throw InputError(describe(path, record_name, problem)); };
    if (bytes.size() - offset < kHeaderBytes) fail("truncated record header");
    const uint64_t length = load_le(bytes, offset, 8);
    if (load_le(bytes, offset + 8, 4) != masked_crc32c(std::string_view(bytes).substr(offset, 8))) fail("length CRC mismatch");
    if (length > bytes.size() - offset - kHeaderBytes || bytes.size() - offset - kHeaderBytes - length < kFooterBytes)
      fail("truncated record: " + std::to_string(length) + " data bytes announced");
    const std::string_view data = std::string_view(bytes).substr(offset + kHeaderBytes, length);
    if (load_le(bytes, offset + kHeaderBytes + length, 4) != masked_crc32c(data)) fail("data CRC mismatch");
    offset += kHeaderBytes + length + kFooterBytes;

    tensorboard::Event event;
    if (!event.ParseFromArray(data.data(), static_cast<int>(data.size()))) fail("not a valid Event");
    if (event.has_file_version() && file_version) *file_version = event.file_version();
    if (!event.has_summary()) continue;
    for (const auto& value : event.summary().value())
      if (value.value_case() == tensorboard::Summary::Value::kSimpleValue)
        scalars.push_back({event.step(), event.wall_time(), value.tag(), value.simple_value()});
  }
  return scalars;
}

}  // namespace mpibert
