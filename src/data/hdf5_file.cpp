// The HDF5 wrapper's non-template half: error detail, opening / building / imaging a file,
// string types and string tables.
#include "hdf5_file.hpp"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "mpibert/core/error.hpp"

namespace mpibert::hdf5 {
namespace {

herr_t keep_innermost(unsigned, const H5E_error2_t* error, void* innermost) {
  if (error->desc && *error->desc) *static_cast<std::string*>(innermost) = error->desc;
  return 0;
}

}  // namespace

std::string hdf5_error_detail() {
  std::string innermost;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, keep_innermost, &innermost);
  H5Eclear2(H5E_DEFAULT);
  const std::string marker = "error message = '";
  const size_t begin = innermost.find(marker);
  if (begin == std::string::npos) return innermost;
  const size_t end = innermost.find('\'', begin + marker.size());
  return innermost.substr(0, innermost.find(':')) + ": " + innermost.substr(begin + marker.size(), end - begin - marker.size());
}

ShardFile::ShardFile(std::string path) : path_(std::move(path)) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // errors become exceptions, not stderr noise
}

void ShardFile::fail(const std::string& record, const std::string& problem) const {
  throw InputError(describe(path_, record, problem));
}

void ShardFile::create_in_memory() {
  Handle fapl = own(H5Pcreate(H5P_FILE_ACCESS), H5Pclose, "", "cannot create properties");
  check(H5Pset_fapl_core(fapl.get(), size_t{1} << 20, false), "", "cannot select in-memory driver");
  file_ = own(H5Fcreate(path_.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), H5Fclose, "", "cannot create");
}

std::string ShardFile::image_and_close() {
  check(H5Fflush(file_.get(), H5F_SCOPE_LOCAL), "", "cannot flush");
  std::string image(static_cast<size_t>(check(H5Fget_file_image(file_.get(), nullptr, 0), "", "cannot get image")), '\0');
  check(H5Fget_file_image(file_.get(), image.data(), image.size()), "", "cannot get image");
  check(file_.close(), "", "cannot close");
  return image;
}

void ShardFile::open() {
  // Shards are written once and renamed into place; locking only breaks on parallel file systems.
  Handle fapl = own(H5Pcreate(H5P_FILE_ACCESS), H5Pclose, "", "cannot create properties");
  check(H5Pset_file_locking(fapl.get(), false, true), "", "cannot disable file locking");
  file_ = own(H5Fopen(path_.c_str(), H5F_ACC_RDONLY, fapl.get()), H5Fclose, "", "cannot open");
}

Handle string_type(const ShardFile& file, size_t size, const std::string& record) {
  Handle type = file.own(H5Tcopy(H5T_C_S1), H5Tclose, record, "cannot create string type");
  file.check(H5Tset_size(type.get(), std::max<size_t>(size, 1)), record, "cannot size string type");
  file.check(H5Tset_strpad(type.get(), H5T_STR_NULLPAD), record, "cannot set string padding");
  file.check(H5Tset_cset(type.get(), H5T_CSET_UTF8), record, "cannot set string encoding");
  return type;
}

std::string dataset_record(const std::string& name) { return "dataset " + name; }

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

}  // namespace mpibert::hdf5
