#include "mpibert/data/shards.hpp"

#include <hdf5.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include "mpibert/core/error.hpp"
#include "mpibert/core/io.hpp"
#include "mpibert/core/json_fields.hpp"

namespace mpibert {
namespace {

constexpr hsize_t kChunkElements = hsize_t{1} << 16;
constexpr unsigned kDeflateLevel = 4;
// Deflate cannot expand data by more than ~1032x; a larger claimed size means corrupt metadata.
constexpr hsize_t kMaxExpansion = 1100;

// Owns one hid_t. close() reports the status, because HDF5 flushes (and so may fail) on close.
class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle() = default;
  Handle(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  Handle(Handle&& other) noexcept : id_(std::exchange(other.id_, H5I_INVALID_HID)), closer_(other.closer_) {}
  Handle& operator=(Handle&& other) noexcept {
    std::swap(id_, other.id_);
    std::swap(closer_, other.closer_);
    return *this;
  }
  ~Handle() { close(); }
  hid_t get() const { return id_; }
  herr_t close() {
    const hid_t id = std::exchange(id_, H5I_INVALID_HID);
    return id >= 0 ? closer_(id) : 0;
  }

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer closer_ = nullptr;
};

herr_t keep_innermost(unsigned, const H5E_error2_t* error, void* innermost) {
  if (error->desc && *error->desc) *static_cast<std::string*>(innermost) = error->desc;
  return 0;
}

// The deepest HDF5 error message is the specific one ("data error detected by Fletcher32
// checksum", "file write failed: ... errno = 28, error message = 'No space left on device' ...").
std::string hdf5_error_detail() {
  std::string innermost;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, keep_innermost, &innermost);
  H5Eclear2(H5E_DEFAULT);
  const std::string marker = "error message = '";
  const size_t begin = innermost.find(marker);
  if (begin == std::string::npos) return innermost;
  const size_t end = innermost.find('\'', begin + marker.size());
  return innermost.substr(0, innermost.find(':')) + ": " +
         innermost.substr(begin + marker.size(), end - begin - marker.size());
}

// Every error names the shard file; `record` names the dataset or attribute.
class ShardFile {
 public:
  explicit ShardFile(std::string path) : path_(std::move(path)) {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // errors become exceptions, not stderr noise
  }
  hid_t id() const { return file_.get(); }

  [[noreturn]] void fail(const std::string& record, const std::string& problem) const {
    throw InputError(describe(path_, record, problem));
  }
  template <class Status>
  Status check(Status status, const std::string& record, const std::string& action) const {
    if (status < 0) fail(record, action + ": " + hdf5_error_detail());
    return status;
  }
  Handle own(hid_t id, Handle::Closer closer, const std::string& record, const std::string& action) const {
    return Handle(check(id, record, action), closer);
  }

  // The file is built in memory (core driver, no backing store) and written out by our own code:
  // HDF5 cannot recover from a failed flush on close (a disk full or RLIMIT_FSIZE would leave a
  // half-closed file that crashes at exit), while write_file_atomic reports errno cleanly.
  void create_in_memory() {
    Handle fapl = own(H5Pcreate(H5P_FILE_ACCESS), H5Pclose, "", "cannot create properties");
    check(H5Pset_fapl_core(fapl.get(), size_t{1} << 20, false), "", "cannot select in-memory driver");
    file_ = own(H5Fcreate(path_.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), H5Fclose, "", "cannot create");
  }
  std::string image_and_close() {
    check(H5Fflush(file_.get(), H5F_SCOPE_LOCAL), "", "cannot flush");
    std::string image(
        static_cast<size_t>(check(H5Fget_file_image(file_.get(), nullptr, 0), "", "cannot get image")), '\0');
    check(H5Fget_file_image(file_.get(), image.data(), image.size()), "", "cannot get image");
    check(file_.close(), "", "cannot close");
    return image;
  }
  void open() {
    // Shards are written once and renamed into place; locking only breaks on parallel file systems.
    Handle fapl = own(H5Pcreate(H5P_FILE_ACCESS), H5Pclose, "", "cannot create properties");
    check(H5Pset_file_locking(fapl.get(), false, true), "", "cannot disable file locking");
    file_ = own(H5Fopen(path_.c_str(), H5F_ACC_RDONLY, fapl.get()), H5Fclose, "", "cannot open");
  }

 private:
  std::string path_;
  Handle file_;
};

// {little-endian type stored in the file, native type in memory}
template <class T>
std::pair<hid_t, hid_t> hdf5_types() {
  if constexpr (std::is_same_v<T, uint8_t>)
    return {H5T_STD_U8LE, H5T_NATIVE_UINT8};
  else if constexpr (std::is_same_v<T, uint16_t>)
    return {H5T_STD_U16LE, H5T_NATIVE_UINT16};
  else if constexpr (std::is_same_v<T, int32_t>)
    return {H5T_STD_I32LE, H5T_NATIVE_INT32};
  else {
    static_assert(std::is_same_v<T, int64_t>, "no HDF5 type for this element type");
    return {H5T_STD_I64LE, H5T_NATIVE_INT64};
  }
}

// Fixed-length UTF-8 string type; HDF5 rejects size 0, so "" is stored as one NUL byte.
Handle string_type(const ShardFile& file, size_t size, const std::string& record) {
  Handle type = file.own(H5Tcopy(H5T_C_S1), H5Tclose, record, "cannot create string type");
  file.check(H5Tset_size(type.get(), std::max<size_t>(size, 1)), record, "cannot size string type");
  file.check(H5Tset_strpad(type.get(), H5T_STR_NULLPAD), record, "cannot set string padding");
  file.check(H5Tset_cset(type.get(), H5T_CSET_UTF8), record, "cannot set string encoding");
  return type;
}

// Scalar attributes on the root group: int32_t, int64_t or std::string.
template <class T>
void write_attribute(const ShardFile& file, const char* name, const T& value) {
  const std::string record = std::string("attribute ") + name;
  Handle space = file.own(H5Screate(H5S_SCALAR), H5Sclose, record, "cannot create dataspace");
  Handle text_type;
  std::pair<hid_t, hid_t> types;  // stored, native
  const void* buffer = &value;
  if constexpr (std::is_same_v<T, std::string>) {
    text_type = string_type(file, value.size(), record);
    types = {text_type.get(), text_type.get()};
    buffer = value.c_str();
  } else {
    types = hdf5_types<T>();
  }
  Handle attribute = file.own(H5Acreate2(file.id(), name, types.first, space.get(), H5P_DEFAULT, H5P_DEFAULT),
                              H5Aclose, record, "cannot create");
  file.check(H5Awrite(attribute.get(), types.second, buffer), record, "cannot write");
  file.check(attribute.close(), record, "cannot write");
}

template <class T>
T read_attribute(const ShardFile& file, const char* name) {
  const std::string record = std::string("attribute ") + name;
  Handle attribute = file.own(H5Aopen(file.id(), name, H5P_DEFAULT), H5Aclose, record, "missing or unreadable");
  Handle space = file.own(H5Aget_space(attribute.get()), H5Sclose, record, "cannot read dataspace");
  Handle type = file.own(H5Aget_type(attribute.get()), H5Tclose, record, "cannot read type");
  if (H5Sget_simple_extent_npoints(space.get()) != 1) file.fail(record, "is not a single value");
  if constexpr (std::is_same_v<T, std::string>) {
    if (H5Tget_class(type.get()) != H5T_STRING || H5Tis_variable_str(type.get()) != 0)
      file.fail(record, "is not a fixed-length string");
    std::string value(H5Tget_size(type.get()), '\0');
    Handle memory_type = string_type(file, value.size(), record);
    file.check(H5Aread(attribute.get(), memory_type.get(), value.data()), record, "cannot read");
    value.resize(std::min(value.find('\0'), value.size()));
    return value;
  } else {
    if (H5Tget_class(type.get()) != H5T_INTEGER) file.fail(record, "is not an integer");
    T value{};
    file.check(H5Aread(attribute.get(), hdf5_types<T>().second, &value), record, "cannot read");
    return value;
  }
}

// Visits every header field with its attribute name (Header is ShardHeader, const or not).
template <class Header, class Visit>
void for_each_header_field(Header& header, Visit&& visit) {
  visit("format_version", header.format_version);
  visit("split", header.split);
  visit("max_seq_length", header.params.max_seq_length);
  visit("doc_stride", header.params.doc_stride);
  visit("max_query_length", header.params.max_query_length);
  visit("input_sha256", header.input_sha256);
  visit("vocab_sha256", header.vocab_sha256);
  visit("tool_version", header.tool_version);
  visit("shard_index", header.shard_index);
  visit("num_shards", header.num_shards);
  visit("first_example", header.first_example);
  visit("num_examples", header.num_examples);
  visit("num_features", header.num_features);
}

enum class Extent { tokens, features, examples, contexts };

// Visits every stored array: dataset path, values, what it is indexed by and values per row.
// A std::vector<std::string> is stored as a string table (<path>.bytes + <path>.offsets).
template <class ShardT, class Visit>
void for_each_array(ShardT& shard, Visit&& visit) {
  auto& f = shard.features;
  auto& e = shard.examples;
  visit("/features/input_ids", f.input_ids, Extent::tokens, 1);
  visit("/features/offsets", f.offsets, Extent::tokens, 2);
  visit("/features/lengths", f.lengths, Extent::features, 1);
  visit("/features/context_starts", f.context_starts, Extent::features, 1);
  visit("/features/example_indices", f.example_indices, Extent::features, 1);
  visit("/features/window_indices", f.window_indices, Extent::features, 1);
  visit("/features/start_positions", f.start_positions, Extent::features, 1);
  visit("/features/end_positions", f.end_positions, Extent::features, 1);
  visit("/examples/is_impossible", e.is_impossible, Extent::examples, 1);
  visit("/examples/context_indices", e.context_indices, Extent::examples, 1);
  visit("/examples/ids", e.ids, Extent::examples, 1);
  visit("/examples/questions", e.questions, Extent::examples, 1);
  visit("/examples/answers_json", e.answers_json, Extent::examples, 1);
  visit("/contexts/contexts", e.contexts, Extent::contexts, 1);
}

std::string dataset_record(const std::string& name) { return "dataset " + name; }

template <class T>
void write_dataset(const ShardFile& file, const std::string& name, const std::vector<T>& values, hsize_t columns) {
  const std::string record = dataset_record(name);
  const int rank = columns == 1 ? 1 : 2;
  const hsize_t rows = values.size() / columns;
  const hsize_t dims[2] = {rows, columns}, max_dims[2] = {H5S_UNLIMITED, columns};
  const hsize_t chunk[2] = {std::clamp<hsize_t>(kChunkElements / columns, 1, std::max<hsize_t>(rows, 1)), columns};
  Handle space = file.own(H5Screate_simple(rank, dims, max_dims), H5Sclose, record, "cannot create dataspace");
  Handle links = file.own(H5Pcreate(H5P_LINK_CREATE), H5Pclose, record, "cannot create properties");
  Handle layout = file.own(H5Pcreate(H5P_DATASET_CREATE), H5Pclose, record, "cannot create properties");
  file.check(H5Pset_create_intermediate_group(links.get(), 1), record, "cannot set properties");
  // Filters run in this order on write: the checksum covers the bytes actually stored.
  file.check(H5Pset_chunk(layout.get(), rank, chunk), record, "cannot set chunking");
  file.check(H5Pset_shuffle(layout.get()), record, "cannot set shuffle filter");
  file.check(H5Pset_deflate(layout.get(), kDeflateLevel), record, "cannot set deflate filter");
  file.check(H5Pset_fletcher32(layout.get()), record, "cannot set checksum filter");
  const auto [stored, native] = hdf5_types<T>();
  Handle dataset =
      file.own(H5Dcreate2(file.id(), name.c_str(), stored, space.get(), links.get(), layout.get(), H5P_DEFAULT),
               H5Dclose, record, "cannot create");
  if (rows > 0)
    file.check(H5Dwrite(dataset.get(), native, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), record,
               "cannot write");
  file.check(dataset.close(), record, "cannot write");
}

template <class T>
std::vector<T> read_dataset(const ShardFile& file, const std::string& name, hsize_t columns) {
  const std::string record = dataset_record(name);
  Handle dataset =
      file.own(H5Dopen2(file.id(), name.c_str(), H5P_DEFAULT), H5Dclose, record, "missing or unreadable");
  Handle type = file.own(H5Dget_type(dataset.get()), H5Tclose, record, "cannot read type");
  Handle space = file.own(H5Dget_space(dataset.get()), H5Sclose, record, "cannot read dataspace");
  const auto [stored, native] = hdf5_types<T>();
  if (H5Tequal(type.get(), stored) <= 0) file.fail(record, "has an unexpected element type");
  const int rank = columns == 1 ? 1 : 2;
  if (H5Sget_simple_extent_ndims(space.get()) != rank)
    file.fail(record, "has " + std::to_string(H5Sget_simple_extent_ndims(space.get())) + " dimensions, expected " +
                          std::to_string(rank));
  hsize_t dims[2] = {0, 1};
  file.check(H5Sget_simple_extent_dims(space.get(), dims, nullptr), record, "cannot read dataspace");
  if (dims[1] != columns)
    file.fail(record, "has " + std::to_string(dims[1]) + " columns, expected " + std::to_string(columns));
  hsize_t file_size = 0;
  file.check(H5Fget_filesize(file.id(), &file_size), record, "cannot read file size");
  if (dims[0] > file_size * kMaxExpansion / (columns * sizeof(T)))
    file.fail(record, "claims " + std::to_string(dims[0]) + " rows, more than the file can hold");
  std::vector<T> values(dims[0] * columns);
  if (!values.empty())
    file.check(H5Dread(dataset.get(), native, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), record,
               "cannot read");
  return values;
}

void write_strings(const ShardFile& file, const std::string& name, const std::vector<std::string>& strings) {
  std::vector<int64_t> offsets{0};
  offsets.reserve(strings.size() + 1);
  for (const std::string& text : strings) offsets.push_back(offsets.back() + static_cast<int64_t>(text.size()));
  std::vector<uint8_t> bytes;
  bytes.reserve(static_cast<size_t>(offsets.back()));
  for (const std::string& text : strings) bytes.insert(bytes.end(), text.begin(), text.end());
  write_dataset(file, name + ".bytes", bytes, 1);
  write_dataset(file, name + ".offsets", offsets, 1);
}

std::vector<std::string> read_strings(const ShardFile& file, const std::string& name) {
  const std::vector<uint8_t> bytes = read_dataset<uint8_t>(file, name + ".bytes", 1);
  const std::vector<int64_t> offsets = read_dataset<int64_t>(file, name + ".offsets", 1);
  const std::string record = dataset_record(name + ".offsets");
  if (offsets.empty() || offsets.front() != 0) file.fail(record, "must start with 0");
  if (!std::is_sorted(offsets.begin(), offsets.end())) file.fail(record, "is not monotonic");
  if (offsets.back() != static_cast<int64_t>(bytes.size()))
    file.fail(record, "ends at " + std::to_string(offsets.back()) + ", but " + name + ".bytes has " +
                          std::to_string(bytes.size()) + " bytes");
  std::vector<std::string> strings;
  strings.reserve(offsets.size() - 1);
  for (size_t i = 0; i + 1 < offsets.size(); ++i)
    strings.emplace_back(bytes.begin() + offsets[i], bytes.begin() + offsets[i + 1]);
  return strings;
}

// Every relation readers rely on: array sizes agree with the header and with each other, and
// indices stored in the arrays point inside them.
void check_consistent(const ShardFile& file, const Shard& shard) {
  const ShardHeader& header = shard.header;
  const FeatureTable& f = shard.features;
  if (header.num_features < 0 || header.num_examples < 0 || header.first_example < 0)
    file.fail("attributes", "counts and first_example must not be negative");
  const int64_t counts[] = {static_cast<int64_t>(f.num_tokens()), header.num_features, header.num_examples,
                            static_cast<int64_t>(shard.examples.contexts.size())};
  const char* count_names[] = {"tokens", "features (num_features)", "examples (num_examples)", "contexts"};
  for_each_array(shard, [&](const std::string& name, const auto& values, Extent extent, int64_t columns) {
    const int64_t expected = counts[static_cast<int>(extent)] * columns;
    if (static_cast<int64_t>(values.size()) != expected)
      file.fail(dataset_record(name), "has " + std::to_string(values.size()) + " values, expected " +
                                          (columns > 1 ? std::to_string(columns) + " x " : "") +
                                          std::to_string(counts[static_cast<int>(extent)]) + " " +
                                          count_names[static_cast<int>(extent)]);
  });
  const int64_t total_length = std::accumulate(f.lengths.begin(), f.lengths.end(), int64_t{0});
  if (total_length != counts[0])
    file.fail(dataset_record("/features/lengths"), "sums to " + std::to_string(total_length) + " tokens, but " +
                                                       "input_ids has " + std::to_string(counts[0]));
  for (size_t i = 0; i < f.num_features(); ++i) {
    const std::string where = " (feature " + std::to_string(i) + ")";
    auto past_end = [&](uint16_t position) { return position != 0 && position >= f.lengths[i]; };
    if (f.context_starts[i] > f.lengths[i])
      file.fail(dataset_record("/features/context_starts"), "points past the feature's end" + where);
    if (past_end(f.start_positions[i]) || past_end(f.end_positions[i]))
      file.fail(dataset_record("/features/start_positions"), "answer points past the feature's end" + where);
    if (f.example_indices[i] < header.first_example ||
        f.example_indices[i] >= header.first_example + header.num_examples)
      file.fail(dataset_record("/features/example_indices"),
                "example " + std::to_string(f.example_indices[i]) + " is outside the shard's examples" + where);
  }
  for (int32_t context : shard.examples.context_indices)
    if (context < 0 || static_cast<size_t>(context) >= shard.examples.contexts.size())
      file.fail(dataset_record("/examples/context_indices"),
                "context " + std::to_string(context) + " does not exist");
}

ShardHeader read_header(const ShardFile& file) {
  ShardHeader header;
  for_each_header_field(header, [&](const char* name, auto& field) {
    field = read_attribute<std::decay_t<decltype(field)>>(file, name);
  });
  if (header.format_version != kShardFormatVersion)
    file.fail("attribute format_version", "unsupported version " + std::to_string(header.format_version) +
                                              " (this build reads " + std::to_string(kShardFormatVersion) + ")");
  return header;
}

}  // namespace

void write_shard(const std::string& path, const Shard& shard) {
  ShardFile file(path);
  check_consistent(file, shard);
  file.create_in_memory();
  for_each_header_field(shard.header,
                        [&](const char* name, const auto& field) { write_attribute(file, name, field); });
  for_each_array(shard, [&](const std::string& name, const auto& values, Extent, hsize_t columns) {
    if constexpr (std::is_same_v<std::decay_t<decltype(values)>, std::vector<std::string>>)
      write_strings(file, name, values);
    else
      write_dataset(file, name, values, columns);
  });
  write_file_atomic(path, file.image_and_close());  // never leaves a partial file at `path`
}

ShardHeader read_shard_header(const std::string& path) {
  ShardFile file(path);
  file.open();
  return read_header(file);
}

Shard read_shard(const std::string& path) {
  ShardFile file(path);
  file.open();
  Shard shard;
  shard.header = read_header(file);
  for_each_array(shard, [&](const std::string& name, auto& values, Extent, hsize_t columns) {
    using Values = std::decay_t<decltype(values)>;
    if constexpr (std::is_same_v<Values, std::vector<std::string>>)
      values = read_strings(file, name);
    else
      values = read_dataset<typename Values::value_type>(file, name, columns);
  });
  check_consistent(file, shard);
  return shard;
}

std::string hdf5_library_version() {
  unsigned major = 0, minor = 0, release = 0;
  H5get_libversion(&major, &minor, &release);
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(release);
}

std::string shard_file_name(int32_t shard_index, int32_t num_shards) {
  char name[64];
  std::snprintf(name, sizeof name, "shard-%05d-of-%05d.h5", shard_index, num_shards);
  return name;
}

namespace {

using Json = nlohmann::ordered_json;

void check_matches_manifest(const std::string& path, const ShardHeader& header, const Manifest& manifest,
                            const ShardEntry& entry) {
  auto expect_same = [&](const char* attribute, const Json& in_shard, const Json& in_manifest) {
    if (in_shard != in_manifest)
      throw InputError(
          describe(path, std::string("attribute ") + attribute,
                   "is " + in_shard.dump() + ", but " + kManifestName + " says " + in_manifest.dump()));
  };
  expect_same("split", header.split, manifest.split);
  expect_same("tool_version", header.tool_version, manifest.tool_version);
  expect_same("max_seq_length", header.params.max_seq_length, manifest.params.max_seq_length);
  expect_same("doc_stride", header.params.doc_stride, manifest.params.doc_stride);
  expect_same("max_query_length", header.params.max_query_length, manifest.params.max_query_length);
  expect_same("input_sha256", header.input_sha256, manifest.input_sha256);
  expect_same("vocab_sha256", header.vocab_sha256, manifest.vocab_sha256);
  expect_same("first_example", header.first_example, entry.first_example);
  expect_same("num_examples", header.num_examples, entry.num_examples);
  expect_same("num_features", header.num_features, entry.num_features);
}

}  // namespace

std::string manifest_to_json(const Manifest& manifest) {
  Json shards = Json::array();
  for (const ShardEntry& entry : manifest.shards)
    shards.push_back({{"file", entry.file},
                      {"first_example", entry.first_example},
                      {"num_examples", entry.num_examples},
                      {"num_features", entry.num_features}});
  const Json json = {
      {"format", "mpibert-shards"},
      {"format_version", kShardFormatVersion},
      {"tool_version", manifest.tool_version},
      {"split", manifest.split},
      {"parameters",
       {{"max_seq_length", manifest.params.max_seq_length},
        {"doc_stride", manifest.params.doc_stride},
        {"max_query_length", manifest.params.max_query_length}}},
      {"input", {{"path", manifest.input_path}, {"sha256", manifest.input_sha256}}},
      {"vocab", {{"path", manifest.vocab_path}, {"sha256", manifest.vocab_sha256}, {"size", manifest.vocab_size}}},
      {"num_examples", manifest.num_examples},
      {"num_features", manifest.num_features},
      {"shards", shards},
  };
  return json.dump(2) + "\n";
}

Manifest read_manifest(const std::string& dir) {
  const std::string path = dir + "/" + kManifestName;
  const JsonFields fields(path);
  const Json root = fields.parse_object();
  if (fields.text(root, "", "format") != "mpibert-shards") fields.fail("format", "must be \"mpibert-shards\"");
  const int32_t version = fields.integer<int32_t>(root, "", "format_version");
  if (version != kShardFormatVersion)
    fields.fail("format_version", "unsupported version " + std::to_string(version) + " (this build reads " +
                                      std::to_string(kShardFormatVersion) + ")");
  Manifest manifest;
  manifest.tool_version = fields.text(root, "", "tool_version");
  manifest.split = fields.text(root, "", "split");
  const Json& parameters = fields.get(root, "", "parameters", Json::value_t::object);
  manifest.params.max_seq_length = fields.integer<int32_t>(parameters, "parameters", "max_seq_length");
  manifest.params.doc_stride = fields.integer<int32_t>(parameters, "parameters", "doc_stride");
  manifest.params.max_query_length = fields.integer<int32_t>(parameters, "parameters", "max_query_length");
  const Json& input = fields.get(root, "", "input", Json::value_t::object);
  manifest.input_path = fields.text(input, "input", "path");
  manifest.input_sha256 = fields.text(input, "input", "sha256");
  const Json& vocab = fields.get(root, "", "vocab", Json::value_t::object);
  manifest.vocab_path = fields.text(vocab, "vocab", "path");
  manifest.vocab_sha256 = fields.text(vocab, "vocab", "sha256");
  manifest.vocab_size = fields.integer<int64_t>(vocab, "vocab", "size");
  manifest.num_examples = fields.integer<int64_t>(root, "", "num_examples");
  manifest.num_features = fields.integer<int64_t>(root, "", "num_features");
  const Json& shards = fields.get(root, "", "shards", Json::value_t::array);
  int64_t next_example = 0, total_features = 0;
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string name = "shards[" + std::to_string(i) + "]";
    if (!shards[i].is_object()) fields.fail(name, "must be an object");
    ShardEntry entry;
    entry.file = fields.text(shards[i], name, "file");
    entry.first_example = fields.integer<int64_t>(shards[i], name, "first_example");
    entry.num_examples = fields.integer<int64_t>(shards[i], name, "num_examples");
    entry.num_features = fields.integer<int64_t>(shards[i], name, "num_features");
    if (entry.file.empty() || entry.file.find('/') != std::string::npos || entry.file == "." || entry.file == "..")
      fields.fail(name + ".file", "must be a file name inside the directory");
    if (entry.first_example != next_example)
      fields.fail(name + ".first_example", "is " + std::to_string(entry.first_example) + ", expected " +
                                               std::to_string(next_example) +
                                               " (shards must cover examples in order)");
    next_example += entry.num_examples;
    total_features += entry.num_features;
    manifest.shards.push_back(std::move(entry));
  }
  if (next_example != manifest.num_examples)
    fields.fail("num_examples", "is " + std::to_string(manifest.num_examples) + ", but the shards hold " +
                                    std::to_string(next_example));
  if (total_features != manifest.num_features)
    fields.fail("num_features", "is " + std::to_string(manifest.num_features) + ", but the shards hold " +
                                    std::to_string(total_features));
  return manifest;
}

FeatureStore FeatureStore::open(const std::string& dir) {
  FeatureStore store;
  store.manifest_ = read_manifest(dir);
  const std::vector<ShardEntry>& entries = store.manifest_.shards;
  store.shards_.reserve(entries.size());
  for (size_t k = 0; k < entries.size(); ++k) {
    const std::string path = dir + "/" + entries[k].file;
    Shard shard = read_shard(path);
    check_matches_manifest(path, shard.header, store.manifest_, entries[k]);
    store.add_shard(std::move(shard));
  }
  return store;
}

FeatureStore FeatureStore::from_shard(Shard shard) {
  FeatureStore store;
  store.manifest_.split = shard.header.split;
  store.manifest_.params = shard.header.params;
  store.manifest_.num_examples = shard.header.num_examples;
  store.manifest_.num_features = static_cast<int64_t>(shard.features.num_features());
  store.manifest_.shards.push_back({"<memory>", 0, shard.header.num_examples, store.manifest_.num_features});
  store.add_shard(std::move(shard));
  return store;
}

void FeatureStore::add_shard(Shard shard) {
  const auto shard_index = static_cast<int32_t>(shards_.size());
  shard_first_feature_.push_back(num_features());
  int64_t token_start = 0;
  for (uint16_t length : shard.features.lengths) {
    feature_shard_.push_back(shard_index);
    feature_starts_.push_back(token_start);
    token_start += length;
  }
  shards_.push_back(std::move(shard));
}

FeatureView FeatureStore::feature(int64_t index) const {
  if (index < 0 || index >= num_features())
    throw std::out_of_range("feature " + std::to_string(index) + " out of range [0, " +
                            std::to_string(num_features()) + ")");
  const int32_t shard = feature_shard_[index];
  const FeatureTable& table = shards_[shard].features;
  const size_t local = static_cast<size_t>(index - shard_first_feature_[shard]);
  const int64_t token_start = feature_starts_[index];
  return {table.input_ids.data() + token_start,
          table.offsets.data() + 2 * token_start,
          table.lengths[local],
          table.context_starts[local],
          table.example_indices[local],
          table.window_indices[local],
          table.start_positions[local],
          table.end_positions[local]};
}

ExampleView FeatureStore::example(int64_t index) const {
  if (index < 0 || index >= num_examples())
    throw std::out_of_range("example " + std::to_string(index) + " out of range [0, " +
                            std::to_string(num_examples()) + ")");
  // The last shard starting at or before `index`; empty shards before it share its first_example.
  const std::vector<ShardEntry>& entries = manifest_.shards;
  const auto holder =
      std::upper_bound(entries.begin(), entries.end(), index,
                       [](int64_t i, const ShardEntry& entry) { return i < entry.first_example; }) -
      1;
  const ExampleRecords& records = shards_[holder - entries.begin()].examples;
  const size_t local = static_cast<size_t>(index - holder->first_example);
  return {&records.ids[local], &records.questions[local], &records.contexts[records.context_indices[local]],
          &records.answers_json[local], records.is_impossible[local] != 0};
}

}  // namespace mpibert
