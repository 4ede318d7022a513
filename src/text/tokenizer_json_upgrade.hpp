// Internal: tokenizer.json as tokenizers 0.22 reads it. Files written by older releases are still
// on the Hub (a model without "type", Metaspace's add_prefix_space, ...); transformers loads them
// into tokenizers 0.22, which resolves each component by its "type" or, where there is none, by
// its fields in serde's order, and upgrades the old settings. The fast tokenizer classes then apply
// their rules to that upgraded state, so mpibert upgrades the file first too.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace mpibert::tokenizer_parts {

// The file's content with every model, normalizer and post-processor's "type" as tokenizers 0.22
// resolves it, and the state it re-serializes: Metaspace's prepend_scheme and split in place of
// add_prefix_space, ByteLevel's use_regex. A component tokenizers 0.22 refuses to read is left for
// the component's reader to refuse by name; a contradiction that tokenizers 0.22 refuses
// (Metaspace's add_prefix_space false with another prepend_scheme) is an InputError naming
// `origin` and the component's path.
nlohmann::json upgraded_tokenizer_json(nlohmann::json tokenizer, const std::string& origin);

}  // namespace mpibert::tokenizer_parts
