// Typed access to the fields of a JSON file we read (manifest.json, trainer_state.json,
// checksums.json): a field that is missing, of another type or out of range is an InputError
// naming the file and the field ("shards[1].file"), never a JSON library exception.
#pragma once

#include <nlohmann/json.hpp>
#include <cstdint>
#include <limits>
#include <string>

#include "mpibert/core/error.hpp"
#include "mpibert/core/io.hpp"

namespace mpibert {

class JsonFields {
 public:
  using Json = nlohmann::ordered_json;
  explicit JsonFields(std::string path) : path_(std::move(path)) {}

  // The file parsed; it must hold a JSON object.
  Json parse_object() const {
    Json root;
    try {
      root = Json::parse(read_file(path_));
    } catch (const Json::exception& error) {  // parse_error, and out_of_range for a number like 1e400
      fail("", std::string("invalid JSON: ") + error.what());
    }
    if (!root.is_object()) fail("", "must be a JSON object");
    return root;
  }

  [[noreturn]] void fail(const std::string& field, const std::string& problem) const {
    throw InputError(describe(path_, field.empty() ? "" : "field " + field, problem));
  }
  static std::string field_name(const std::string& object_name, const char* key) {
    return object_name.empty() ? key : object_name + "." + key;
  }
  const Json& get(const Json& object, const std::string& object_name, const char* key, Json::value_t type) const {
    const std::string field = field_name(object_name, key);
    const auto found = object.find(key);
    if (found == object.end()) fail(field, "missing");
    const bool integer_wanted = type == Json::value_t::number_integer;
    const bool number_wanted = type == Json::value_t::number_float;
    const bool matches = integer_wanted ? found->is_number_integer() : number_wanted ? found->is_number() : found->type() == type;
    if (!matches)
      fail(field, std::string("must be ") +
                      (integer_wanted  ? "an integer"
                       : number_wanted ? "a number"
                                       : Json(type).type_name()) +
                      ", not " + found->type_name());
    return *found;
  }
  std::string text(const Json& object, const std::string& object_name, const char* key) const {
    return get(object, object_name, key, Json::value_t::string).get<std::string>();
  }
  double number(const Json& object, const std::string& object_name, const char* key) const {
    return get(object, object_name, key, Json::value_t::number_float).get<double>();
  }
  // An integer in [minimum, T's maximum].
  template <class T>
  T integer(const Json& object, const std::string& object_name, const char* key, T minimum = 0) const {
    const Json& value = get(object, object_name, key, Json::value_t::number_integer);
    const bool fits = value.is_number_unsigned()
                          ? value.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max())
                          : value.get<int64_t>() >= minimum && value.get<int64_t>() <= std::numeric_limits<T>::max();
    if (!fits) fail(field_name(object_name, key), "is out of range: " + value.dump());
    return static_cast<T>(value.get<int64_t>());
  }

 private:
  std::string path_;
};

}  // namespace mpibert
