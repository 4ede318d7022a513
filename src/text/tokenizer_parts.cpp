// What the components share: matching a pattern over a text, splitting by the matches as HF's
// SplitDelimiterBehavior says, and reading tokenizer.json's fields with their paths in messages.
#include "tokenizer_parts.hpp"

#include <algorithm>

#include "mpibert/core/error.hpp"

namespace mpibert::tokenizer_parts {

void refuse(const Where& where, const std::string& problem) { throw InputError(describe(where.file, where.path, problem)); }

const nlohmann::json& field(const nlohmann::json& json, const Where& where, const char* key) {
  if (!json.is_object()) refuse(where, "must be a JSON object");
  const auto it = json.find(key);
  if (it == json.end()) refuse(where, std::string("has no \"") + key + "\"");
  return *it;
}

std::string string_field(const nlohmann::json& json, const Where& where, const char* key) {
  const nlohmann::json& value = field(json, where, key);
  return string_value(value, where.at(key));
}

std::string string_field(const nlohmann::json& json, const Where& where, const char* key, const std::string& otherwise) {
  if (!json.is_object()) refuse(where, "must be a JSON object");
  const auto it = json.find(key);
  return it == json.end() ? otherwise : string_value(*it, where.at(key));
}

std::string string_value(const nlohmann::json& value, const Where& where) {
  if (!value.is_string()) refuse(where, "must be a string, not " + std::string(value.type_name()));
  return value.get<std::string>();
}

int64_t integer_field(const nlohmann::json& json, const Where& where, const char* key, int64_t otherwise, int64_t least,
                      int64_t most) {
  if (!json.is_object()) refuse(where, "must be a JSON object");
  const auto it = json.find(key);
  if (it == json.end()) return otherwise;
  // An unsigned number above int64's range reads negative as int64: refused as out of range.
  const bool in_range = it->is_number_integer() && it->get<int64_t>() >= least && it->get<int64_t>() <= most &&
                        !(it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(most));
  if (!in_range)
    refuse(where.at(key),
           "must be a whole number from " + std::to_string(least) + " to " + std::to_string(most) + ", not " + it->dump());
  return it->get<int64_t>();
}

int32_t token_id(const nlohmann::json& value, const Where& where) {
  const bool in_range = value.is_number_integer() && value.get<int64_t>() >= 0 && value.get<int64_t>() <= kMaxTokenId &&
                        !(value.is_number_unsigned() && value.get<uint64_t>() > static_cast<uint64_t>(kMaxTokenId));
  if (!in_range) refuse(where, "an id must be a whole number from 0 to " + std::to_string(kMaxTokenId) + ", not " + value.dump());
  return static_cast<int32_t>(value.get<int64_t>());
}

bool bool_field(const nlohmann::json& json, const Where& where, const char* key, bool otherwise) {
  if (!json.is_object()) refuse(where, "must be a JSON object");
  const auto it = json.find(key);
  if (it == json.end() || it->is_null()) return otherwise;
  if (!it->is_boolean()) refuse(where.at(key), "must be true or false");
  return it->get<bool>();
}

Behavior behavior_of(const nlohmann::json& json, const Where& where) {
  const std::string name = string_field(json, where, "behavior");
  if (name == "Removed") return Behavior::kRemoved;
  if (name == "Isolated") return Behavior::kIsolated;
  if (name == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return Behavior::kMergedWithNext;
  if (name == "Contiguous") return Behavior::kContiguous;
  refuse(where.at("behavior"), "\"" + name + "\" is none of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous");
}

Matches find_matches(const Regex& regex, const std::u32string& text) {
  if (text.empty()) return {{{0, 0}, false}};
  Matches matches;
  size_t previous = 0;
  for (const auto& [begin, end] : regex.find_all(text)) {
    if (previous != begin) matches.push_back({{previous, begin}, false});
    matches.push_back({{begin, end}, true});
    previous = end;
  }
  if (previous != text.size()) matches.push_back({{previous, text.size()}, false});
  return matches;
}

Matches find_matches(bool (*is)(char32_t), const std::u32string& text) {
  if (text.empty()) return {{{0, 0}, false}};
  Matches matches;
  size_t last = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (!is(text[i])) continue;
    if (last < i) matches.push_back({{last, i}, false});
    matches.push_back({{i, i + 1}, true});
    last = i + 1;
  }
  if (text.size() > last) matches.push_back({{last, text.size()}, false});
  return matches;
}

Matches invert(Matches matches) {
  for (auto& match : matches) match.second = !match.second;
  return matches;
}

// HF's NormalizedString::split.
std::vector<NormalizedText> split(const NormalizedText& text, const Matches& matches, Behavior behavior) {
  std::vector<std::pair<std::pair<size_t, size_t>, bool>> splits;  // (range, remove)
  bool previous_match = false;
  switch (behavior) {
    case Behavior::kIsolated:
      for (const auto& [range, matched] : matches) splits.push_back({range, false});
      break;
    case Behavior::kRemoved: splits = matches; break;
    case Behavior::kContiguous:
      for (const auto& [range, matched] : matches) {
        if (matched == previous_match && !splits.empty())
          splits.back().first.second = range.second;
        else
          splits.push_back({range, false});
        previous_match = matched;
      }
      break;
    case Behavior::kMergedWithPrevious:
      for (const auto& [range, matched] : matches) {
        if (matched && !previous_match && !splits.empty())
          splits.back().first.second = range.second;
        else
          splits.push_back({range, false});
        previous_match = matched;
      }
      break;
    case Behavior::kMergedWithNext:
      for (auto it = matches.rbegin(); it != matches.rend(); ++it) {
        if (it->second && !previous_match && !splits.empty())
          splits.back().first.first = it->first.first;
        else
          splits.push_back({it->first, false});
        previous_match = it->second;
      }
      std::reverse(splits.begin(), splits.end());
      break;
  }
  std::vector<NormalizedText> pieces;
  for (const auto& [range, remove] : splits)
    if (!remove) pieces.push_back(text.slice(range.first, range.second));
  return pieces;
}

}  // namespace mpibert::tokenizer_parts
