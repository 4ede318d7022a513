// Internal to the data layer: a thin HDF5 wrapper. Owned handles, errors that name the file and
// the record (dataset or attribute), scalar attributes, chunked + filtered datasets and string
// tables (shards.cpp lays the shard schema out with these).
#pragma once

#include <hdf5.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "mpibert/core/error.hpp"

namespace mpibert::hdf5 {

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

// The deepest HDF5 error message is the specific one ("data error detected by Fletcher32
// checksum", "file write failed: ... errno = 28, error message = 'No space left on device' ...").
std::string hdf5_error_detail();

// Every error names the shard file; `record` names the dataset or attribute.
class ShardFile {
 public:
  explicit ShardFile(std::string path);
  hid_t id() const { return file_.get(); }

  [[noreturn]] void fail(const std::string& record, const std::string& problem) const;
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
  void create_in_memory();
  std::string image_and_close();
  void open();

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
  else if constexpr (std::is_same_v<T, uint32_t>)
    return {H5T_STD_U32LE, H5T_NATIVE_UINT32};
  else if constexpr (std::is_same_v<T, int32_t>)
    return {H5T_STD_I32LE, H5T_NATIVE_INT32};
  else {
    static_assert(std::is_same_v<T, int64_t>, "no HDF5 type for this element type");
    return {H5T_STD_I64LE, H5T_NATIVE_INT64};
  }
}

// Fixed-length UTF-8 string type; HDF5 rejects size 0, so "" is stored as one NUL byte.
Handle string_type(const ShardFile& file, size_t size, const std::string& record);

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
  Handle attribute = file.own(H5Acreate2(file.id(), name, types.first, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose, record,
                              "cannot create");
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

std::string dataset_record(const std::string& name);

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
  // No modification times in the object headers: the same features give the same file, byte for byte.
  file.check(H5Pset_obj_track_times(layout.get(), false), record, "cannot set properties");
  const auto [stored, native] = hdf5_types<T>();
  Handle dataset = file.own(H5Dcreate2(file.id(), name.c_str(), stored, space.get(), links.get(), layout.get(), H5P_DEFAULT),
                            H5Dclose, record, "cannot create");
  if (rows > 0) file.check(H5Dwrite(dataset.get(), native, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), record, "cannot write");
  file.check(dataset.close(), record, "cannot write");
}

template <class T>
std::vector<T> read_dataset(const ShardFile& file, const std::string& name, hsize_t columns) {
  const std::string record = dataset_record(name);
  Handle dataset = file.own(H5Dopen2(file.id(), name.c_str(), H5P_DEFAULT), H5Dclose, record, "missing or unreadable");
  Handle type = file.own(H5Dget_type(dataset.get()), H5Tclose, record, "cannot read type");
  Handle space = file.own(H5Dget_space(dataset.get()), H5Sclose, record, "cannot read dataspace");
  const auto [stored, native] = hdf5_types<T>();
  // uint32 values may be stored as uint16 (input ids of vocabularies up to 65,536 tokens).
  const bool widened = std::is_same_v<T, uint32_t> && H5Tequal(type.get(), H5T_STD_U16LE) > 0;
  if (H5Tequal(type.get(), stored) <= 0 && !widened) file.fail(record, "has an unexpected element type");
  const int rank = columns == 1 ? 1 : 2;
  if (H5Sget_simple_extent_ndims(space.get()) != rank)
    file.fail(record,
              "has " + std::to_string(H5Sget_simple_extent_ndims(space.get())) + " dimensions, expected " + std::to_string(rank));
  hsize_t dims[2] = {0, 1};
  file.check(H5Sget_simple_extent_dims(space.get(), dims, nullptr), record, "cannot read dataspace");
  if (dims[1] != columns) file.fail(record, "has " + std::to_string(dims[1]) + " columns, expected " + std::to_string(columns));
  hsize_t file_size = 0;
  file.check(H5Fget_filesize(file.id(), &file_size), record, "cannot read file size");
  if (dims[0] > file_size * kMaxExpansion / (columns * sizeof(T)))
    file.fail(record, "claims " + std::to_string(dims[0]) + " rows, more than the file can hold");
  std::vector<T> values(dims[0] * columns);
  if (!values.empty())
    file.check(H5Dread(dataset.get(), native, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), record, "cannot read");
  return values;
}

// A string table: <name>.bytes (the strings back to back) + <name>.offsets (size + 1 offsets).
void write_strings(const ShardFile& file, const std::string& name, const std::vector<std::string>& strings);
std::vector<std::string> read_strings(const ShardFile& file, const std::string& name);

}  // namespace mpibert::hdf5
