#include "formats/json_file.h"

#include "formats/error.h"
#include "formats/mapped_file.h"

namespace bonsai {

nlohmann::json parse_json(const std::string& path, const uint8_t* data, size_t n, int max_depth) {
  const auto guard = [&](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
    if (depth > max_depth) fail(path, "JSON nested deeper than ", max_depth, " levels");
    return true;
  };
  try {
    return nlohmann::json::parse(data, data + n, guard);
  } catch (const nlohmann::json::exception& e) {
    fail(path, "invalid JSON: ", e.what());
  }
}

nlohmann::json read_json_file(const std::string& path, uint64_t max_bytes, int max_depth) {
  const auto file = MappedFile::open(path);
  if (file->size() > max_bytes)
    fail(path, "JSON file of ", file->size(), " bytes is larger than the ", max_bytes, " allowed");
  return parse_json(path, file->data(), size_t(file->size()), max_depth);
}

const char* json_kind(const nlohmann::json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null: return "null";
    case nlohmann::json::value_t::object: return "an object";
    case nlohmann::json::value_t::array: return "an array";
    case nlohmann::json::value_t::string: return "a string";
    case nlohmann::json::value_t::boolean: return "a boolean";
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned: return "an integer";
    case nlohmann::json::value_t::number_float: return "a float";
    default: return "a binary value";
  }
}

std::string json_brief(const nlohmann::json& j) {
  std::string s = j.dump();
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return s;
}

}  // namespace bonsai
