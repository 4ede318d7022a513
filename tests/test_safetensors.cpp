#include "mpibert/nn/safetensors.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>

#include "mpibert/core/error.hpp"
#include "mpibert/core/io.hpp"
#include "test_support.hpp"

namespace mpibert {
namespace {

// A file as the format lays it out: 8-byte little-endian header length, header, data.
std::string raw_file(const std::string& header, const std::string& data = "") {
  const uint64_t length = header.size();
  std::string bytes(8, '\0');
  std::memcpy(bytes.data(), &length, 8);
  return bytes + header + data;
}

std::string bytes_of(const torch::Tensor& tensor) {
  return std::string(static_cast<const char*>(tensor.data_ptr()), tensor.nbytes());
}

// Opening `contents` fails with a message naming the file and containing `fragment`.
void expect_open_error(const std::string& contents, const std::string& fragment) {
  test::TempDir dir;
  const std::string path = dir.file("bad.safetensors");
  test::write_text(path, contents);
  try {
    SafetensorsFile::open(path);
    ADD_FAILURE() << "no error for " << fragment;
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

// Writing `tensors` fails with a message naming the file and containing `fragment`, leaving no file.
void expect_write_error(const std::vector<NamedTensor>& tensors, const std::string& fragment) {
  test::TempDir dir;
  const std::string path = dir.file("out.safetensors");
  try {
    write_safetensors(path, tensors);
    ADD_FAILURE() << "no error for " << fragment;
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
  EXPECT_TRUE(dir.entries().empty());
}

bool is_mapped(const std::string& path) { return read_file_bytes("/proc/self/maps").find(path) != std::string::npos; }

void expect_same(const torch::Tensor& actual, const torch::Tensor& expected) {
  EXPECT_EQ(actual.scalar_type(), expected.scalar_type());
  EXPECT_EQ(actual.sizes(), expected.sizes());
  EXPECT_TRUE(actual.device().is_cpu());
  EXPECT_EQ(bytes_of(actual), bytes_of(expected.contiguous()));  // bit for bit, NaN included
}

TEST(Safetensors, RoundTripsEveryDtype) {
  const std::vector<NamedTensor> tensors = {
      {"f64", torch::tensor({1.0 / 3, -1e300, 5e-324}, torch::kDouble)},
      {"f32", torch::tensor({0.1f, -3.5f, std::numeric_limits<float>::infinity(), std::nanf("")})},
      {"f16", torch::tensor({1.0, -2.5, 65504.0, 6e-8}).to(torch::kHalf)},
      {"bf16", torch::tensor({1.0, -3.140625, 3.0e38, 1e-38}).to(torch::kBFloat16)},
      {"i64", torch::tensor({std::numeric_limits<int64_t>::min(), int64_t{0}, std::numeric_limits<int64_t>::max()})},
      {"i32", torch::tensor({-2147483647 - 1, 7, 2147483647}, torch::kInt)},
      {"i16", torch::tensor({-32768, 1, 32767}).to(torch::kShort)},
      {"i8", torch::tensor({-128, 0, 127}).to(torch::kChar)},
      {"u8", torch::tensor({0, 128, 255}).to(torch::kByte)},
      {"bool", torch::tensor({true, false, true})},
  };
  test::TempDir dir;
  write_safetensors(dir.file("all.safetensors"), tensors);
  const SafetensorsFile file = SafetensorsFile::open(dir.file("all.safetensors"));
  ASSERT_EQ(file.tensors().size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    SCOPED_TRACE(tensors[i].name);
    EXPECT_EQ(file.tensors()[i].name, tensors[i].name);
    expect_same(file.tensors()[i].tensor, tensors[i].tensor);
  }
  EXPECT_FLOAT_EQ(file.get("f16")[1].item<float>(), -2.5f);
  EXPECT_FLOAT_EQ(file.get("bf16")[1].item<float>(), -3.140625f);
  EXPECT_EQ(file.path(), dir.file("all.safetensors"));
}

TEST(Safetensors, RoundTripsScalarsAndZeroElementTensors) {
  const std::vector<NamedTensor> tensors = {
      {"empty_first", torch::zeros({0})},
      {"scalar_f32", torch::tensor(2.75f)},
      {"empty_3d", torch::zeros({3, 0, 2}, torch::kLong)},
      {"scalar_i64", torch::tensor(int64_t{-9})},
      {"empty_last", torch::zeros({0, 4}, torch::kBFloat16)},
  };
  test::TempDir dir;
  write_safetensors(dir.file("edge.safetensors"), tensors);
  const SafetensorsFile file = SafetensorsFile::open(dir.file("edge.safetensors"));
  ASSERT_EQ(file.tensors().size(), tensors.size());
  for (const NamedTensor& expected : tensors) {
    SCOPED_TRACE(expected.name);
    expect_same(file.get(expected.name), expected.tensor);
  }
  EXPECT_EQ(file.get("scalar_f32").dim(), 0);
  EXPECT_EQ(file.get("scalar_i64").item<int64_t>(), -9);

  // Only empty tensors: the data section itself is empty.
  write_safetensors(dir.file("empty.safetensors"), {{"nothing", torch::zeros({0, 3})}});
  EXPECT_EQ(SafetensorsFile::open(dir.file("empty.safetensors")).get("nothing").sizes(), torch::IntArrayRef({0, 3}));
  write_safetensors(dir.file("none.safetensors"), {});
  EXPECT_TRUE(SafetensorsFile::open(dir.file("none.safetensors")).tensors().empty());
}

TEST(Safetensors, StoresNonContiguousTensorsByValue) {
  const torch::Tensor matrix = torch::arange(12, torch::kFloat).reshape({3, 4});
  const torch::Tensor transposed = matrix.t();
  const torch::Tensor strided = matrix.select(1, 2);  // stride 4
  ASSERT_FALSE(transposed.is_contiguous());
  ASSERT_FALSE(strided.is_contiguous());
  test::TempDir dir;
  write_safetensors(dir.file("views.safetensors"), {{"transposed", transposed}, {"strided", strided}});
  const SafetensorsFile file = SafetensorsFile::open(dir.file("views.safetensors"));
  EXPECT_TRUE(torch::equal(file.get("transposed"), transposed));
  EXPECT_TRUE(torch::equal(file.get("strided"), torch::tensor({2.0f, 6.0f, 10.0f})));
  EXPECT_TRUE(file.get("transposed").is_contiguous());
}

TEST(Safetensors, RoundTripsMetadataAndOmitsItWhenEmpty) {
  test::TempDir dir;
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"step", "12"}, {"note", "ünïcode \"q\""}};
  write_safetensors(dir.file("meta.safetensors"), {{"x", torch::ones({2})}}, metadata);
  EXPECT_EQ(SafetensorsFile::open(dir.file("meta.safetensors")).metadata(), metadata);

  write_safetensors(dir.file("plain.safetensors"), {{"x", torch::ones({2})}});
  EXPECT_TRUE(SafetensorsFile::open(dir.file("plain.safetensors")).metadata().empty());
  EXPECT_EQ(read_file_bytes(dir.file("plain.safetensors")).find("__metadata__"), std::string::npos);
}

TEST(Safetensors, LayoutIsPaddedHeaderThenDataInGivenOrder) {
  const torch::Tensor b = torch::arange(5, torch::kShort);  // 10 bytes: leaves the next tensor unaligned
  const torch::Tensor a = torch::tensor({1.5, -2.0}, torch::kDouble);
  test::TempDir dir;
  write_safetensors(dir.file("layout.safetensors"), {{"b", b}, {"a", a}}, {{"k", "v"}});
  const std::string bytes = read_file_bytes(dir.file("layout.safetensors"));

  uint64_t header_size = 0;
  std::memcpy(&header_size, bytes.data(), 8);
  EXPECT_EQ(header_size % 8, 0u);
  ASSERT_EQ(bytes.size(), 8 + header_size + 10 + 16);
  const std::string header_text = bytes.substr(8, header_size);
  EXPECT_EQ(header_text.front(), '{');
  EXPECT_EQ(header_text.find_last_not_of(' '), header_text.find_last_of('}'));  // only spaces after the JSON

  const auto header = nlohmann::ordered_json::parse(header_text);
  std::vector<std::string> keys;
  for (const auto& item : header.items()) keys.push_back(item.key());
  EXPECT_EQ(keys, (std::vector<std::string>{"__metadata__", "b", "a"}));
  EXPECT_EQ(header["b"]["dtype"], "I16");
  EXPECT_EQ(header["b"]["shape"], nlohmann::ordered_json::array({5}));
  EXPECT_EQ(header["b"]["data_offsets"], nlohmann::ordered_json::array({0, 10}));
  EXPECT_EQ(header["a"]["data_offsets"], nlohmann::ordered_json::array({10, 26}));
  EXPECT_EQ(bytes.substr(8 + header_size), bytes_of(b) + bytes_of(a));

  // The reader copes with the unaligned double.
  expect_same(SafetensorsFile::open(dir.file("layout.safetensors")).get("a"), a);
}

TEST(Safetensors, ReadsInDataOrderAcceptingGaps) {
  const int32_t values[] = {7, 8, 9};
  std::string data(4, 'x');  // a gap before the first tensor
  data.append(reinterpret_cast<const char*>(values), sizeof values);
  const std::string header = R"({"late":{"dtype":"I32","shape":[2],"data_offsets":[8,16]},)"
                             R"("early":{"dtype":"I32","shape":[],"data_offsets":[4,8]},"__metadata__":{"a":"b"}})";
  test::TempDir dir;
  test::write_text(dir.file("order.safetensors"), raw_file(header, data));
  const SafetensorsFile file = SafetensorsFile::open(dir.file("order.safetensors"));
  ASSERT_EQ(file.tensors().size(), 2u);
  EXPECT_EQ(file.tensors()[0].name, "early");
  EXPECT_EQ(file.tensors()[1].name, "late");
  EXPECT_EQ(file.get("early").item<int32_t>(), 7);
  EXPECT_TRUE(torch::equal(file.get("late"), torch::tensor({8, 9}, torch::kInt)));
  EXPECT_EQ(file.metadata().at("a"), "b");
}

TEST(Safetensors, TensorsViewTheMappingAndOutliveFileAndObject) {
  test::TempDir dir;
  const std::string path = dir.file("view.safetensors");
  write_safetensors(path, {{"w", torch::arange(1000, torch::kFloat)}});
  torch::Tensor kept;
  {
    const SafetensorsFile file = SafetensorsFile::open(path);
    const NamedTensor* found = file.find("w");
    ASSERT_NE(found, nullptr);
    EXPECT_EQ(found->tensor.data_ptr(), file.get("w").data_ptr());  // no copies
    kept = file.get("w");
  }
  std::filesystem::remove(path);
  EXPECT_TRUE(torch::equal(kept, torch::arange(1000, torch::kFloat)));
  EXPECT_EQ(kept.clone().add_(1).sum().item<float>(), 500500.0f);  // the documented way to modify
  EXPECT_TRUE(is_mapped(path));
  kept.reset();  // the last view: the mapping goes with it
  EXPECT_FALSE(is_mapped(path));
}

TEST(Safetensors, FindAndGetReportMissingTensors) {
  test::TempDir dir;
  const std::string path = dir.file("one.safetensors");
  write_safetensors(path, {{"present", torch::ones({1})}});
  const SafetensorsFile file = SafetensorsFile::open(path);
  EXPECT_EQ(file.find("absent"), nullptr);
  try {
    file.get("absent");
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("absent"), std::string::npos) << e.what();
  }
}

TEST(SafetensorsFixtures, ModelHasHfNamesAndFloat32Weights) {
  const std::string dir = test::fixtures_dir() + "/model";
  const auto config = nlohmann::json::parse(read_file_bytes(dir + "/config.json"));
  const int64_t hidden = config.at("hidden_size").get<int64_t>();
  const SafetensorsFile model = SafetensorsFile::open(dir + "/model.safetensors");
  EXPECT_EQ(model.tensors().size(), 39u);
  for (const NamedTensor& named : model.tensors()) EXPECT_EQ(named.tensor.scalar_type(), torch::kFloat) << named.name;
  EXPECT_EQ(model.tensors().front().name, "bert.embeddings.word_embeddings.weight");
  EXPECT_EQ(model.get("bert.embeddings.word_embeddings.weight").sizes(),
            torch::IntArrayRef({config.at("vocab_size").get<int64_t>(), hidden}));
  EXPECT_NE(model.find("bert.encoder.layer.0.attention.self.query.weight"), nullptr);
  EXPECT_EQ(model.get("qa_outputs.weight").sizes(), torch::IntArrayRef({2, hidden}));
  EXPECT_EQ(model.find("bert.embeddings.position_ids"), nullptr);
  EXPECT_EQ(model.metadata().at("seed"), "1234");
  // Row 0 is the padding_idx, zeroed by HF's initialisation.
  EXPECT_EQ(model.get("bert.embeddings.word_embeddings.weight")[0].abs().sum().item<float>(), 0.0f);
}

TEST(SafetensorsFixtures, BatchHasInt64InputsShapedLikeTheMask) {
  const SafetensorsFile batch = SafetensorsFile::open(test::fixtures_dir() + "/model/batch.safetensors");
  const torch::Tensor input_ids = batch.get("input_ids");
  EXPECT_EQ(input_ids.scalar_type(), torch::kLong);
  EXPECT_EQ(input_ids.sizes(), batch.get("attention_mask").sizes());
  EXPECT_EQ(input_ids.sizes(), torch::IntArrayRef({4, 48}));
  EXPECT_EQ(input_ids[0][0].item<int64_t>(), 101);  // [CLS]
}

TEST(SafetensorsFixtures, EveryFixtureFileOpens) {
  for (const char* name : {"expected", "final", "trajectory_batches"}) {
    const SafetensorsFile file = SafetensorsFile::open(test::fixtures_dir() + "/model/" + name + ".safetensors");
    EXPECT_FALSE(file.tensors().empty()) << name;
  }
}

TEST(SafetensorsErrors, ShortOrMissingFiles) {
  expect_open_error("", "too short");
  expect_open_error("1234567", "too short");
  expect_open_error(raw_file("{}").substr(0, 8), "");  // header length 2 with nothing after it
  expect_open_error(raw_file("{}").substr(0, 8) + "{", "exceeds");
  test::TempDir dir;
  try {
    SafetensorsFile::open(dir.file("missing.safetensors"));
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(dir.file("missing.safetensors")), std::string::npos) << e.what();
  }
  try {
    SafetensorsFile::open(dir.path());
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(dir.path() + ": not a regular file"), std::string::npos) << e.what();
  }
  std::string huge(8, '\xff');
  expect_open_error(huge + "{}", "exceeds");
}

TEST(SafetensorsErrors, HeaderNotAJsonObject) {
  expect_open_error(raw_file("{\"x\":"), "not valid JSON");
  expect_open_error(raw_file("\xff\xfe"), "not valid JSON");
  expect_open_error(raw_file("[1, 2]"), "not a JSON object");
  expect_open_error(raw_file(R"({"__metadata__":{"k":1}})"), "not a string");
  expect_open_error(raw_file(R"({"__metadata__":[]})"), "__metadata__");
}

TEST(SafetensorsErrors, EntriesMissingFieldsOrOfWrongTypes) {
  const std::string data(8, '\0');
  expect_open_error(raw_file(R"({"t":5})", data), "\"t\": entry is not a JSON object");
  expect_open_error(raw_file(R"({"t":{"shape":[2],"data_offsets":[0,8]}})", data), "\"t\": \"dtype\"");
  expect_open_error(raw_file(R"({"t":{"dtype":4,"shape":[2],"data_offsets":[0,8]}})", data), "\"dtype\"");
  expect_open_error(raw_file(R"({"t":{"dtype":"F32","data_offsets":[0,8]}})", data), "\"t\": \"shape\"");
  expect_open_error(raw_file(R"({"t":{"dtype":"F32","shape":2,"data_offsets":[0,8]}})", data), "\"shape\"");
  expect_open_error(raw_file(R"({"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", data), "\"shape\"");
  expect_open_error(raw_file(R"({"t":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", data), "\"shape\"");
  expect_open_error(raw_file(R"({"t":{"dtype":"F32","shape":[2]}})", data), "\"t\": \"data_offsets\"");
  expect_open_error(raw_file(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,4,8]}})", data), "\"data_offsets\"");
  expect_open_error(raw_file(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[-1,8]}})", data), "\"data_offsets\"");
  expect_open_error(raw_file(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":"0-8"}})", data), "\"data_offsets\"");
}

TEST(SafetensorsErrors, UnknownDtype) {
  expect_open_error(raw_file(R"({"t":{"dtype":"C64","shape":[1],"data_offsets":[0,8]}})", std::string(8, '\0')),
                    "\"t\": unknown dtype \"C64\"");
}

TEST(SafetensorsErrors, OffsetsOutsideTheDataSection) {
  const std::string data(8, '\0');
  expect_open_error(raw_file(R"({"t":{"dtype":"U8","shape":[0],"data_offsets":[8,4]}})", data), "\"t\": data_offsets");
  expect_open_error(raw_file(R"({"t":{"dtype":"U8","shape":[12],"data_offsets":[0,12]}})", data), "8-byte data section");
  expect_open_error(raw_file(R"({"t":{"dtype":"U8","shape":[0],"data_offsets":[9,9]}})", data), "data_offsets [9,9]");
}

TEST(SafetensorsErrors, SizeNotMatchingShape) {
  const std::string data(16, '\0');
  expect_open_error(raw_file(R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})", data), "need 12 bytes");
  expect_open_error(raw_file(R"({"t":{"dtype":"F64","shape":[],"data_offsets":[0,4]}})", data), "need 8 bytes");
  expect_open_error(raw_file(R"({"t":{"dtype":"F32","shape":[4294967296,4294967296,4],"data_offsets":[0,16]}})", data),
                    "too large");
}

TEST(SafetensorsErrors, OverlappingTensors) {
  const std::string data(16, '\0');
  expect_open_error(raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                             data),
                    "\"b\": data overlaps that of tensor \"a\"");
  expect_open_error(raw_file(R"({"b":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                             R"("a":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                             data),
                    "overlaps");
}

TEST(SafetensorsErrors, WritingUnstorableTensorsOrToABadPath) {
  expect_write_error({{"c", torch::zeros({2}, torch::kComplexFloat)}}, "\"c\": dtype ComplexFloat cannot be stored");
  expect_write_error({{"t", torch::ones({1})}, {"t", torch::ones({1})}}, "given twice");
  expect_write_error({{"__metadata__", torch::ones({1})}}, "reserved");
  expect_write_error({{"u", torch::Tensor()}}, "undefined");
  test::TempDir dir;
  const std::string path = dir.file("no/such/dir.safetensors");
  try {
    write_safetensors(path, {{"t", torch::ones({1})}});
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mpibert
