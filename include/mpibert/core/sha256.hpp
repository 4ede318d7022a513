// SHA-256 and HMAC-SHA256 as raw bytes: the probe ports' challenge-response (runtime/peers)
// proves knowledge of the job's token without sending it. (Hex SHA-256 of files: io.hpp.)
#pragma once

#include <string>
#include <string_view>

namespace mpibert {

// SHA-256 (FIPS 180-4) of `bytes`: 32 raw bytes.
std::string sha256(std::string_view bytes);

// HMAC-SHA256 (RFC 2104) of `message` under `key`: 32 raw bytes.
std::string hmac_sha256(std::string_view key, std::string_view message);

// Whether a and b hold the same bytes, in a time that depends on their lengths only (so that how
// long a check of a MAC takes says nothing about how much of it was right).
bool equal_in_constant_time(std::string_view a, std::string_view b);

}  // namespace mpibert
