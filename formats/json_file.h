// JSON as the readers take it: from a byte range or a whole file, with its size and nesting
// bounded, and every parse error turned into an Error naming the file. Shared by the
// safetensors header, its shard index and Hugging Face config.json.
#pragma once
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace bonsai {

// Parses bytes [data, data + n) as one JSON value; `path` names the file in errors. Nesting
// deeper than `max_depth` is refused (no reader here needs more than a few levels, and a
// bounded depth keeps a hostile file from exhausting the stack).
nlohmann::json parse_json(const std::string& path, const uint8_t* data, size_t n, int max_depth = 32);

// Maps and parses a whole file of at most max_bytes.
nlohmann::json read_json_file(const std::string& path, uint64_t max_bytes = 100u << 20, int max_depth = 32);

// The kind of a JSON value in words ("a string", "an array", ...) for error messages.
const char* json_kind(const nlohmann::json& j);
// The value as JSON text, cut to about 40 characters, for error messages.
std::string json_brief(const nlohmann::json& j);

}  // namespace bonsai
