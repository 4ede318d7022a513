#include "mpibert/nn/safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>

#include "mpibert/core/error.hpp"
#include "mpibert/core/io.hpp"

namespace mpibert {
namespace {

// Mapped and written bytes are used as they are, and the format is little-endian.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors I/O assumes a little-endian host");

using Json = nlohmann::ordered_json;  // keeps the header in the order written
constexpr const char* kMetadataKey = "__metadata__";
constexpr uint64_t kLengthBytes = 8;  // the header length that opens the file

struct Dtype {
  const char* name;
  torch::ScalarType type;
};
constexpr Dtype kDtypes[] = {{"F64", torch::kDouble}, {"F32", torch::kFloat}, {"F16", torch::kHalf},  {"BF16", torch::kBFloat16},
                             {"I64", torch::kLong},   {"I32", torch::kInt},   {"I16", torch::kShort}, {"I8", torch::kChar},
                             {"U8", torch::kByte},    {"BOOL", torch::kBool}};

template <typename Matches>
const Dtype* find_dtype(Matches matches) {
  const auto* found = std::find_if(std::begin(kDtypes), std::end(kDtypes), matches);
  return found == std::end(kDtypes) ? nullptr : found;
}

std::string tensor_record(const std::string& name) { return "tensor " + quote_excerpt(name, 200); }

// A whole file mapped read-only; unmapped when the last tensor viewing it is gone.
class Mapping {
 public:
  explicit Mapping(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw InputError(describe(path, "", std::string("cannot open: ") + std::strerror(errno)));
    struct stat info {};
    std::string problem;
    if (::fstat(fd, &info) != 0 || (S_ISREG(info.st_mode) && !map(fd, static_cast<size_t>(info.st_size))))
      problem = std::string("cannot map: ") + std::strerror(errno);
    else if (!S_ISREG(info.st_mode))
      problem = "not a regular file";
    ::close(fd);
    if (!problem.empty()) throw InputError(describe(path, "", problem));
  }
  ~Mapping() {
    if (size_ > 0) ::munmap(data_, size_);
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;

  const char* bytes() const { return static_cast<const char*>(data_); }
  uint64_t size() const { return size_; }

 private:
  bool map(int fd, size_t size) {
    if (size == 0) return true;  // mmap rejects a zero length; there is nothing to view anyway
    // Private and writable: an in-place write copies the page (copy-on-write), the file never changes.
    void* data = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    if (data == MAP_FAILED) return false;
    data_ = data;
    size_ = size;
    return true;
  }

  void* data_ = nullptr;
  size_t size_ = 0;
};

// One validated header entry; offsets are relative to the data section.
struct Entry {
  std::string name;
  torch::ScalarType type;
  std::vector<int64_t> shape;
  uint64_t begin, end;
};

Entry parse_entry(const std::string& path, const std::string& name, const Json& spec, uint64_t data_size) {
  const auto error = [&](const std::string& problem) { return InputError(describe(path, tensor_record(name), problem)); };
  if (!spec.is_object()) throw error("entry is not a JSON object");
  const auto dtype = spec.find("dtype"), shape = spec.find("shape"), offsets = spec.find("data_offsets");
  if (dtype == spec.end() || !dtype->is_string()) throw error("\"dtype\" is missing or not a string");
  const Dtype* known = find_dtype([&](const Dtype& d) { return d.name == dtype->get<std::string>(); });
  if (!known) throw error("unknown dtype " + quote_excerpt(dtype->get<std::string>()));
  if (shape == spec.end() || !shape->is_array()) throw error("\"shape\" is missing or not an array");
  if (offsets == spec.end() || !offsets->is_array() || offsets->size() != 2 || !(*offsets)[0].is_number_unsigned() ||
      !(*offsets)[1].is_number_unsigned())
    throw error("\"data_offsets\" is missing or not [begin, end]");

  Entry entry{name, known->type, {}, (*offsets)[0].get<uint64_t>(), (*offsets)[1].get<uint64_t>()};
  uint64_t bytes = c10::elementSize(entry.type);
  for (const Json& dim : *shape) {
    if (!dim.is_number_unsigned() || dim.get<uint64_t>() > uint64_t{INT64_MAX})
      throw error("\"shape\" " + shape->dump() + " holds something other than a dimension size");
    entry.shape.push_back(dim.get<int64_t>());
    if (__builtin_mul_overflow(bytes, dim.get<uint64_t>(), &bytes)) throw error("\"shape\" " + shape->dump() + " is too large");
  }
  if (entry.begin > entry.end || entry.end > data_size)
    throw error("data_offsets " + offsets->dump() + " do not lie within the " + std::to_string(data_size) + "-byte data section");
  if (bytes != entry.end - entry.begin)
    throw error("dtype " + std::string(known->name) + " and shape " + shape->dump() + " need " + std::to_string(bytes) +
                " bytes but data_offsets " + offsets->dump() + " span " + std::to_string(entry.end - entry.begin));
  return entry;
}

std::map<std::string, std::string> parse_metadata(const std::string& path, const Json& spec) {
  if (!spec.is_object()) throw InputError(describe(path, kMetadataKey, "not a JSON object"));
  std::map<std::string, std::string> metadata;
  for (const auto& item : spec.items()) {
    if (!item.value().is_string())
      throw InputError(describe(path, std::string(kMetadataKey) + " " + quote_excerpt(item.key()), "value is not a string"));
    metadata[item.key()] = item.value().get<std::string>();
  }
  return metadata;
}

// A tensor over `entry`'s bytes of the mapping, which it keeps alive.
torch::Tensor view_of(const std::shared_ptr<const Mapping>& mapping, const char* data, const Entry& entry) {
  const auto options = torch::TensorOptions().dtype(entry.type);
  if (entry.begin == entry.end) return torch::empty(entry.shape, options);  // may lie just past the mapping
  void* start = const_cast<char*>(data + entry.begin);                      // read-only memory: see the header
  torch::Tensor view = torch::from_blob(
      start, entry.shape, [mapping](void*) {}, options);
  // Other writers need not pad the header, and kernels expect aligned elements.
  return reinterpret_cast<uintptr_t>(start) % view.element_size() == 0 ? view : view.clone();
}

}  // namespace

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  const auto mapping = std::make_shared<const Mapping>(path);
  const auto error = [&](const std::string& problem) { return InputError(describe(path, "", problem)); };
  const uint64_t file_size = mapping->size();
  if (file_size < kLengthBytes)
    throw error("file is " + std::to_string(file_size) + " bytes long, too short for the 8-byte header length");
  uint64_t header_size;
  std::memcpy(&header_size, mapping->bytes(), kLengthBytes);
  if (header_size > file_size - kLengthBytes)
    throw error("header length " + std::to_string(header_size) + " exceeds the " + std::to_string(file_size - kLengthBytes) +
                " bytes that follow it");

  const char* header_text = mapping->bytes() + kLengthBytes;
  Json header;
  try {
    header = Json::parse(header_text, header_text + header_size);
  } catch (const Json::exception& e) {
    throw error(std::string("header is not valid JSON: ") + e.what());
  }
  if (!header.is_object()) throw error("header is not a JSON object");

  SafetensorsFile file;
  file.path_ = path;
  const uint64_t data_size = file_size - kLengthBytes - header_size;
  std::vector<Entry> entries;
  for (const auto& item : header.items()) {
    if (item.key() == kMetadataKey)
      file.metadata_ = parse_metadata(path, item.value());
    else
      entries.push_back(parse_entry(path, item.key(), item.value(), data_size));
  }

  // Any order and gaps are allowed; shared bytes are not.
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.begin < b.begin; });
  const Entry* previous = nullptr;  // the last entry holding data
  for (const Entry& entry : entries) {
    if (entry.begin == entry.end) continue;
    if (previous && entry.begin < previous->end)
      throw InputError(describe(path, tensor_record(entry.name), "data overlaps that of " + tensor_record(previous->name)));
    previous = &entry;
  }

  const char* data = header_text + header_size;
  for (const Entry& entry : entries) file.tensors_.push_back({entry.name, view_of(mapping, data, entry)});
  return file;
}

const NamedTensor* SafetensorsFile::find(const std::string& name) const {
  const auto found = std::find_if(tensors_.begin(), tensors_.end(), [&](const NamedTensor& t) { return t.name == name; });
  return found == tensors_.end() ? nullptr : &*found;
}

torch::Tensor SafetensorsFile::get(const std::string& name) const {
  if (const NamedTensor* found = find(name)) return found->tensor;
  throw InputError(describe(path_, tensor_record(name), "not in the file"));
}

void write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  Json header = Json::object();
  if (!metadata.empty()) header[kMetadataKey] = metadata;
  std::vector<torch::Tensor> contents;  // contiguous CPU copies only where needed
  uint64_t data_size = 0;
  for (const NamedTensor& named : tensors) {
    const auto error = [&](const std::string& problem) { return InputError(describe(path, tensor_record(named.name), problem)); };
    if (named.name == kMetadataKey) throw error("the name is reserved for metadata");
    if (header.contains(named.name)) throw error("the name is given twice");
    if (!named.tensor.defined()) throw error("tensor is undefined");
    const Dtype* dtype = find_dtype([&](const Dtype& d) { return d.type == named.tensor.scalar_type(); });
    if (!dtype) throw error(std::string("dtype ") + c10::toString(named.tensor.scalar_type()) + " cannot be stored");
    torch::Tensor content = named.tensor.detach().to(torch::kCPU).contiguous();
    const uint64_t size = content.nbytes();
    header[named.name] = {
        {"dtype", dtype->name}, {"shape", content.sizes().vec()}, {"data_offsets", {data_size, data_size + size}}};
    data_size += size;
    contents.push_back(std::move(content));
  }

  std::string header_text = header.dump();
  header_text.resize((header_text.size() + 7) / 8 * 8, ' ');  // keeps the data 8-byte aligned, as the spec asks
  const uint64_t header_size = header_text.size();
  std::string bytes(kLengthBytes + header_size + data_size, '\0');
  std::memcpy(bytes.data(), &header_size, kLengthBytes);
  std::memcpy(bytes.data() + kLengthBytes, header_text.data(), header_size);
  char* data = bytes.data() + kLengthBytes + header_size;
  for (const torch::Tensor& content : contents) {
    if (content.nbytes() > 0) std::memcpy(data, content.data_ptr(), content.nbytes());  // no pointer when empty
    data += content.nbytes();
  }
  write_file_atomic(path, bytes);
}

}  // namespace mpibert
