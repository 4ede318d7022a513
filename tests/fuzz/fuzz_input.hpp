// What every harness needs: the fuzzer's bytes as files in a scratch folder of this process (the
// readers take paths, as the product does), and the split of one input into several files.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace mpibert::fuzz {

// A folder of this process, in /dev/shm when there is one (no disk traffic per execution).
inline const std::string& scratch_dir() {
  // Never destroyed: the exit handler that removes the folder runs after static destructors.
  static const std::string* dir = [] {
    const char* base = std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : "/tmp";
    auto* path = new std::string(std::string(base) + "/mpibert-fuzz-" + std::to_string(::getpid()));
    std::filesystem::remove_all(*path);
    std::filesystem::create_directories(*path);
    std::atexit([] { std::filesystem::remove_all(scratch_dir()); });
    return path;
  }();
  return *dir;
}

// Writes `bytes` to scratch_dir()/name (sub-folders made) and returns its path.
inline std::string write_file(const std::string& name, std::string_view bytes) {
  const std::filesystem::path path = std::filesystem::path(scratch_dir()) / name;
  std::filesystem::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return path.string();
}

inline std::string_view as_text(const uint8_t* data, size_t size) { return {reinterpret_cast<const char*>(data), size}; }

// Splits an input into at most `parts` pieces at kSeparator (in each harness's dictionary), so
// that one input can hold a dataset and its predictions; missing pieces are empty.
inline constexpr std::string_view kSeparator = "\n=====\n";
inline std::vector<std::string_view> split(std::string_view input, size_t parts) {
  std::vector<std::string_view> pieces;
  while (pieces.size() + 1 < parts) {
    const size_t at = input.find(kSeparator);
    if (at == std::string_view::npos) break;
    pieces.push_back(input.substr(0, at));
    input.remove_prefix(at + kSeparator.size());
  }
  pieces.push_back(input);
  pieces.resize(parts);
  return pieces;
}

}  // namespace mpibert::fuzz
