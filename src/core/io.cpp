#include "mpibert/core/io.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "mpibert/core/error.hpp"

namespace mpibert {

std::string read_file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(describe(path, "", std::string("cannot open: ") + std::strerror(errno)));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) throw InputError(describe(path, "", "read failed"));
  return buffer.str();
}

namespace {

// Inflates every gzip member in `compressed`; a stream that ends early is an error.
std::string gunzip(const std::string& path, const std::string& compressed) {
  z_stream stream{};
  if (inflateInit2(&stream, 15 + 32) != Z_OK) throw InputError(describe(path, "", "zlib init failed"));
  std::string out;
  out.reserve(compressed.size() * 5);
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(compressed.data()));
  stream.avail_in = static_cast<uInt>(compressed.size());
  char chunk[1 << 16];
  int status = Z_OK;
  while (true) {
    stream.next_out = reinterpret_cast<Bytef*>(chunk);
    stream.avail_out = sizeof chunk;
    status = inflate(&stream, Z_NO_FLUSH);
    out.append(chunk, sizeof chunk - stream.avail_out);
    if (status == Z_STREAM_END) {
      if (stream.avail_in == 0) break;
      inflateReset(&stream);  // concatenated gzip members
      continue;
    }
    if (status != Z_OK) break;
    if (stream.avail_in == 0 && stream.avail_out != 0) {
      status = Z_BUF_ERROR;  // input exhausted before the end of the stream
      break;
    }
  }
  std::string zlib_message = stream.msg ? stream.msg : "";
  inflateEnd(&stream);
  if (status != Z_STREAM_END) {
    std::string problem = status == Z_BUF_ERROR
                              ? "gzip stream is truncated (ended after " + std::to_string(stream.total_in) + " compressed bytes)"
                              : "gzip stream is corrupt" + (zlib_message.empty() ? "" : " (" + zlib_message + ")");
    throw InputError(describe(path, "", problem));
  }
  return out;
}

}  // namespace

std::string read_file(const std::string& path) {
  std::string bytes = read_file_bytes(path);
  bool is_gzip = bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x1f &&
                 static_cast<unsigned char>(bytes[1]) == 0x8b;
  return is_gzip ? gunzip(path, bytes) : bytes;
}

nlohmann::json read_json_file(const std::string& path) {
  try {
    return nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {  // parse_error, and out_of_range for a number like 1e400
    throw InputError(describe(path, "", std::string("not valid JSON: ") + e.what()));
  }
}

std::string sha256_file(const std::string& path) { return sha256_hex(read_file_bytes(path)); }

FileChecksum checksum_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(describe(path, "", std::string("cannot open: ") + std::strerror(errno)));
  FileChecksum sum;
  sum.crc32 = static_cast<uint32_t>(crc32(0L, Z_NULL, 0));
  std::vector<char> chunk(size_t{1} << 20);
  while (in) {
    in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    const auto got = in.gcount();
    sum.crc32 = static_cast<uint32_t>(crc32(sum.crc32, reinterpret_cast<const Bytef*>(chunk.data()), static_cast<uInt>(got)));
    sum.bytes += got;
  }
  if (in.bad()) throw InputError(describe(path, "", "read failed"));
  return sum;
}

std::string temporary_path_for(const std::string& final_path) { return final_path + ".tmp." + std::to_string(::getpid()); }

void write_file_atomic(const std::string& path, std::string_view bytes) {
  const std::string tmp = temporary_path_for(path);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw InputError(describe(path, "", std::string("cannot create: ") + std::strerror(errno)));
  size_t written = 0;
  while (written < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = errno;
      ::close(fd);
      remove_quietly(tmp);
      throw InputError(describe(path, "", std::string("write failed: ") + std::strerror(err)));
    }
    written += static_cast<size_t>(n);
  }
  int sync_status = ::fsync(fd);
  int err = errno;
  if (::close(fd) != 0 && sync_status == 0) {
    sync_status = -1;
    err = errno;
  }
  if (sync_status != 0) {
    remove_quietly(tmp);
    throw InputError(describe(path, "", std::string("write failed: ") + std::strerror(err)));
  }
  try {
    rename_file(tmp, path);
  } catch (...) {
    remove_quietly(tmp);
    throw;
  }
}

void rename_file(const std::string& from, const std::string& to) {
  if (std::rename(from.c_str(), to.c_str()) != 0)
    throw InputError(describe(to, "", std::string("cannot rename ") + from + " to it: " + std::strerror(errno)));
}

void remove_quietly(const std::string& path) noexcept { std::remove(path.c_str()); }

void link_atomic(const std::string& target, const std::string& link_path) {
  const std::string staging = temporary_path_for(link_path);
  if (::symlink(target.c_str(), staging.c_str()) != 0)
    throw InputError(describe(link_path, "", std::string("cannot create a link to ") + target + ": " + std::strerror(errno)));
  try {
    rename_file(staging, link_path);
  } catch (...) {
    remove_quietly(staging);
    throw;
  }
}

}  // namespace mpibert
