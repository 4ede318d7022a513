// Base64 (RFC 4648, with padding) as tokenizer.json stores binary fields (Precompiled's charsmap).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace mpibert {

// The bytes `text` encodes; nullopt when it is not base64.
std::optional<std::string> base64_decode(std::string_view text);
std::string base64_encode(std::string_view bytes);

}  // namespace mpibert
