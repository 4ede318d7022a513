// File input/output shared by every module: whole-file reads (plain or gzip), SHA-256, and writes
// that never leave a half-written file under the final name.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>

namespace mpibert {

// Reads a whole file. Gzip input (recognized by its magic bytes, whatever the name) is inflated;
// a truncated or corrupt stream is an InputError naming the file.
std::string read_file(const std::string& path);
// The bytes as stored, never inflated.
std::string read_file_bytes(const std::string& path);
// A JSON file (plain or gzip), parsed; invalid JSON is an InputError naming the file.
nlohmann::json read_json_file(const std::string& path);

// Hex SHA-256 of bytes / of a file's raw (not inflated) bytes.
std::string sha256_hex(std::string_view bytes);
std::string sha256_file(const std::string& path);

// Size and CRC-32 (zlib's, as gzip and PNG use) of a file's raw bytes: checkpoint checksums,
// an order of magnitude faster than SHA-256 on a bert-base checkpoint's gigabyte
// (docs/measurements.md).
struct FileChecksum {
  int64_t bytes = 0;
  uint32_t crc32 = 0;
  bool operator==(const FileChecksum& other) const { return bytes == other.bytes && crc32 == other.crc32; }
};
FileChecksum checksum_file(const std::string& path);
// A temporary name beside `final_path`, unique to this process.
std::string temporary_path_for(const std::string& final_path);

// Writes `bytes` to a temporary file beside `path`, flushes it, then renames it over `path`.
// On any failure the temporary file is removed and an InputError names `path`.
void write_file_atomic(const std::string& path, std::string_view bytes);

// rename(2) with an InputError on failure.
void rename_file(const std::string& from, const std::string& to);

// Makes `link_path` a symbolic link to `target` (relative to the link's folder), replacing what
// was there atomically; an InputError names `link_path` on failure.
void link_atomic(const std::string& target, const std::string& link_path);

// Removes a file if it exists; never throws.
void remove_quietly(const std::string& path) noexcept;

}  // namespace mpibert
