// Reading and writing the safetensors format: an 8-byte little-endian header length, a JSON header
// (an optional "__metadata__" string map, then {"dtype", "shape", "data_offsets"} per tensor, padded
// with spaces to a multiple of 8 bytes), then the raw little-endian tensor data.
#pragma once

#include <torch/types.h>

#include <map>
#include <string>
#include <vector>

namespace mpibert {

struct NamedTensor {
  std::string name;
  torch::Tensor tensor;
};

// Supported dtypes: F64, F32, F16, BF16, I64, I32, I16, I8, U8 and BOOL.
//
// A safetensors file mapped into memory. Its tensors are CPU tensors of the stored dtype that view
// a private mapping (zero copy); the mapping lives as long as any of them does, so they may
// outlive this object. The mapping is private: writing into a tensor copies the page, never the file.
class SafetensorsFile {
 public:
  // Maps `path` and validates its header; any problem is an InputError naming the file and, where
  // one is at fault, the tensor.
  static SafetensorsFile open(const std::string& path);

  // In file order (by data offset), whatever the order of the header.
  const std::vector<NamedTensor>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const NamedTensor* find(const std::string& name) const;  // nullptr if absent
  torch::Tensor get(const std::string& name) const;        // InputError naming file and tensor if absent
  const std::string& path() const { return path_; }

 private:
  SafetensorsFile() = default;

  std::string path_;
  std::vector<NamedTensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

// Writes `tensors` in the given order, with `metadata` first in the header when not empty. Tensors
// may live on any device and have any strides; they are stored as contiguous CPU data. The file
// appears under `path` only once complete (temporary name, then rename). Problems (an unsupported
// dtype, a name given twice or "__metadata__", an unwritable path) are InputErrors naming `path`.
void write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace mpibert
