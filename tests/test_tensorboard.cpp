#include <gtest/gtest.h>

#include <cstring>
#include <regex>

#include <nlohmann/json.hpp>

#include "mpibert/core/error.hpp"
#include "mpibert/core/io.hpp"
#include "mpibert/train/tensorboard.hpp"
#include "test_support.hpp"

namespace mpibert {
namespace {

// One field of protobuf wire format, decoded by hand (independently of the generated classes).
struct WireField {
  uint32_t number;
  int wire_type;      // 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32
  uint64_t integer;   // varint or fixed value
  std::string bytes;  // length-delimited payload
};

uint64_t parse_varint(const std::string& in, size_t& pos) {
  uint64_t value = 0;
  for (int shift = 0; pos < in.size(); shift += 7) {
    const auto byte = static_cast<unsigned char>(in[pos++]);
    value |= uint64_t{byte & 0x7Fu} << shift;
    if (!(byte & 0x80)) return value;
  }
  ADD_FAILURE() << "varint runs past the end";
  return value;
}

uint64_t load_le(const std::string& in, size_t pos, int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) value |= uint64_t{static_cast<unsigned char>(in.at(pos + i))} << (8 * i);
  return value;
}

std::vector<WireField> parse_message(const std::string& in) {
  std::vector<WireField> fields;
  size_t pos = 0;
  while (pos < in.size()) {
    const uint64_t key = parse_varint(in, pos);
    WireField field{static_cast<uint32_t>(key >> 3), static_cast<int>(key & 7), 0, {}};
    switch (field.wire_type) {
      case 0: field.integer = parse_varint(in, pos); break;
      case 1:
        field.integer = load_le(in, pos, 8);
        pos += 8;
        break;
      case 5:
        field.integer = load_le(in, pos, 4);
        pos += 4;
        break;
      case 2: {
        const uint64_t length = parse_varint(in, pos);
        field.bytes = in.substr(pos, length);
        pos += length;
        break;
      }
      default: ADD_FAILURE() << "unexpected wire type " << field.wire_type; return fields;
    }
    fields.push_back(field);
  }
  EXPECT_EQ(pos, in.size());
  return fields;
}

double as_double(uint64_t bits) {
  double value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

float as_float(uint64_t bits) {
  const auto bits32 = static_cast<uint32_t>(bits);
  float value;
  std::memcpy(&value, &bits32, sizeof value);
  return value;
}

// Splits a file into record payloads, checking the TFRecord framing by hand.
std::vector<std::string> records_of(const std::string& file) {
  std::vector<std::string> records;
  for (size_t pos = 0; pos < file.size();) {
    const uint64_t length = load_le(file, pos, 8);
    EXPECT_EQ(load_le(file, pos + 8, 4), masked_crc32c(file.substr(pos, 8)));
    records.push_back(file.substr(pos + 12, length));
    EXPECT_EQ(load_le(file, pos + 12 + length, 4), masked_crc32c(records.back()));
    pos += 12 + length + 4;
  }
  return records;
}

std::string write_sample_run(const std::string& dir) {
  TensorBoardWriter writer(dir);
  for (int64_t step = 0; step < 3; ++step) {
    writer.add_scalar("train/loss", 2.5 - step, step, 1000.0 + step);
    writer.add_scalar("train/learning_rate", 1e-4 * (step + 1), step, 1000.5 + step);
  }
  writer.add_scalar("eval/f1", 88.25, 3, 2000.0);
  return writer.path();
}

void expect_input_error_naming(const std::string& path, const std::string& expected_problem) {
  try {
    read_tensorboard_scalars(path);
    ADD_FAILURE() << "no error for a damaged file (" << expected_problem << ")";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find(path), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find(expected_problem), std::string::npos) << error.what();
  }
}

TEST(Crc32c, KnownVectors) {
  EXPECT_EQ(crc32c(""), 0u);
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(crc32c(std::string(32, '\xff')), 0x62A8AB43u);
  std::string ascending;
  for (int i = 0; i < 32; ++i) ascending.push_back(static_cast<char>(i));
  EXPECT_EQ(crc32c(ascending), 0x46DD794Eu);
}

TEST(Crc32c, MaskRotatesAndOffsets) {
  const uint32_t crc = 0xE3069283u;
  EXPECT_EQ(masked_crc32c("123456789"), ((crc >> 15) | (crc << 17)) + 0xa282ead8u);
}

TEST(TensorBoardWriter, ScalarsReadBackInOrder) {
  test::TempDir dir;
  const std::string path = write_sample_run(dir.path() + "/runs/a");  // nested: created on demand
  std::string file_version;
  const std::vector<ScalarEvent> scalars = read_tensorboard_scalars(path, &file_version);
  EXPECT_EQ(file_version, "brain.Event:2");
  ASSERT_EQ(scalars.size(), 7u);
  for (int64_t step = 0; step < 3; ++step) {
    const ScalarEvent& loss = scalars[2 * step];
    const ScalarEvent& lr = scalars[2 * step + 1];
    EXPECT_EQ(loss.tag, "train/loss");
    EXPECT_EQ(loss.step, step);
    EXPECT_EQ(loss.value, static_cast<float>(2.5 - step));
    EXPECT_EQ(loss.wall_time, 1000.0 + step);
    EXPECT_EQ(lr.tag, "train/learning_rate");
    EXPECT_EQ(lr.step, step);
    EXPECT_EQ(lr.value, static_cast<float>(1e-4 * (step + 1)));
  }
  EXPECT_EQ(scalars[6].tag, "eval/f1");
  EXPECT_EQ(scalars[6].step, 3);
  EXPECT_EQ(scalars[6].value, 88.25f);
}

TEST(TensorBoardWriter, FlushMakesRecordsVisibleWhileOpen) {
  test::TempDir dir;
  TensorBoardWriter writer(dir.path());
  EXPECT_TRUE(read_tensorboard_scalars(writer.path()).empty());  // file_version alone is already on disk
  writer.add_scalar("train/loss", 1.0, 7);
  writer.flush();
  const std::vector<ScalarEvent> scalars = read_tensorboard_scalars(writer.path());
  ASSERT_EQ(scalars.size(), 1u);
  EXPECT_EQ(scalars[0].step, 7);
  EXPECT_GT(scalars[0].wall_time, 1.6e9);  // defaulted to now
}

TEST(TensorBoardWriter, FileNameFollowsTensorBoardConvention) {
  test::TempDir dir;
  std::string first, second;
  {
    TensorBoardWriter a(dir.path());
    TensorBoardWriter b(dir.path());  // same second, same process: must still be a new file
    first = a.path();
    second = b.path();
  }
  EXPECT_NE(first, second);
  const std::regex pattern(R"(events\.out\.tfevents\.\d{10}\.[^./][^/]*\.\d+\.\d+)");
  for (const std::string& name : dir.entries()) EXPECT_TRUE(std::regex_match(name, pattern)) << name;
  EXPECT_EQ(dir.entries().size(), 2u);
  EXPECT_EQ(first.rfind(dir.path() + "/", 0), 0u);
}

TEST(TensorBoardWriter, BytesAreTensorFlowEventsDecodedByHand) {
  test::TempDir dir;
  const double before = unix_time_now();
  const std::string path = write_sample_run(dir.path());
  const std::string bytes = read_file_bytes(path);
  // Every TensorFlow-written events file starts with these 12 bytes: length 24, then its masked CRC.
  EXPECT_EQ(bytes.substr(0, 12), std::string("\x18\0\0\0\0\0\0\0\xa3\x7f\x4b\x22", 12));
  const std::vector<std::string> records = records_of(bytes);
  ASSERT_EQ(records.size(), 8u);

  // Event{wall_time = 1 (fixed64 double), file_version = 3 (string)}.
  const std::vector<WireField> header = parse_message(records[0]);
  ASSERT_EQ(header.size(), 2u);
  EXPECT_EQ(header[0].number, 1u);
  EXPECT_EQ(header[0].wire_type, 1);
  EXPECT_GE(as_double(header[0].integer), before - 1);
  EXPECT_LE(as_double(header[0].integer), unix_time_now() + 1);
  EXPECT_EQ(header[1].number, 3u);
  EXPECT_EQ(header[1].wire_type, 2);
  EXPECT_EQ(header[1].bytes, "brain.Event:2");

  // The last: Event{wall_time = 1, step = 2 (varint), summary = 5 {value = 1 {tag = 1, simple_value = 2 (fixed32)}}}.
  const std::vector<WireField> event = parse_message(records[7]);
  ASSERT_EQ(event.size(), 3u);
  EXPECT_EQ(event[0].number, 1u);
  EXPECT_EQ(as_double(event[0].integer), 2000.0);
  EXPECT_EQ(event[1].number, 2u);
  EXPECT_EQ(event[1].wire_type, 0);
  EXPECT_EQ(event[1].integer, 3u);
  EXPECT_EQ(event[2].number, 5u);
  EXPECT_EQ(event[2].wire_type, 2);
  const std::vector<WireField> summary = parse_message(event[2].bytes);
  ASSERT_EQ(summary.size(), 1u);
  EXPECT_EQ(summary[0].number, 1u);
  const std::vector<WireField> value = parse_message(summary[0].bytes);
  ASSERT_EQ(value.size(), 2u);
  EXPECT_EQ(value[0].number, 1u);
  EXPECT_EQ(value[0].bytes, "eval/f1");
  EXPECT_EQ(value[1].number, 2u);
  EXPECT_EQ(value[1].wire_type, 5);
  EXPECT_EQ(as_float(value[1].integer), 88.25f);
}

// Text and hparams as TensorBoard itself reads them (its EventAccumulator and the hparams plugin's
// protos, tests/read_tensorboard.py), beside the scalars.
TEST(TensorBoardWriter, TextAndHparamsAreReadByTensorBoard) {
  test::TempDir dir;
  {
    TensorBoardWriter writer(dir.path());
    writer.add_text("args", "{\"seed\": 42}");
    writer.add_hparams({{"learning_rate", 3e-5}, {"optim", std::string("adamw_torch_fused")}, {"bf16", true}});
    writer.add_scalar("train/loss", 1.5, 1);
  }
  const test::CommandResult read =
      test::run_command(std::string(MPIBERT_PYTHON) + " " + MPIBERT_TESTS_SOURCE_DIR + "/read_tensorboard.py " + dir.path());
  ASSERT_EQ(read.exit_status, 0) << read.output;
  const auto events = nlohmann::json::parse(read.output);
  EXPECT_EQ(events["scalars"], nlohmann::json::array({"train/loss"}));
  EXPECT_EQ(events["text"], nlohmann::json::parse(R"({"args/text_summary": ["{\"seed\": 42}"]})"));
  EXPECT_EQ(events["hparams"], nlohmann::json::parse(R"({"learning_rate": 3e-05, "optim": "adamw_torch_fused", "bf16": true})"));
}

TEST(ReadTensorBoardScalars, FlippedDataByteIsAnError) {
  test::TempDir dir;
  const std::string path = write_sample_run(dir.path());
  std::string bytes = read_file_bytes(path);
  const size_t second_record = 12 + load_le(bytes, 0, 8) + 4;
  bytes[second_record + 12 + 3] ^= 0x01;  // inside the second record's Event
  test::write_text(path, bytes);
  expect_input_error_naming(path, "record 1");
  expect_input_error_naming(path, "data CRC");
}

TEST(ReadTensorBoardScalars, FlippedLengthIsAnError) {
  test::TempDir dir;
  const std::string path = write_sample_run(dir.path());
  std::string bytes = read_file_bytes(path);
  bytes[0] ^= 0x04;
  test::write_text(path, bytes);
  expect_input_error_naming(path, "record 0");
  expect_input_error_naming(path, "length CRC");
}

TEST(ReadTensorBoardScalars, TruncatedFileIsAnError) {
  test::TempDir dir;
  const std::string path = write_sample_run(dir.path());
  const std::string bytes = read_file_bytes(path);
  const size_t records = records_of(bytes).size();
  test::write_text(path, bytes.substr(0, bytes.size() - 1));  // last record loses its data CRC byte
  expect_input_error_naming(path, "record " + std::to_string(records - 1));
  expect_input_error_naming(path, "truncated");
  test::write_text(path, bytes.substr(0, bytes.size() - 30));  // cut inside the last record's data
  expect_input_error_naming(path, "truncated");
  test::write_text(path, bytes + std::string(5, '\0'));  // a partial header after the last record
  expect_input_error_naming(path, "record " + std::to_string(records));
}

TEST(TensorBoardWriter, UncreatableDirectoryIsAnInputError) {
  test::TempDir dir;
  test::write_text(dir.file("plain"), "not a directory");
  const std::string log_dir = dir.file("plain") + "/run";
  try {
    TensorBoardWriter writer(log_dir);
    ADD_FAILURE() << "opened a writer under a regular file";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find(log_dir), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace mpibert
