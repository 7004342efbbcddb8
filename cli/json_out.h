// Metadata values as JSON for --json output; arrays longer than `max_items` are abbreviated to
// {"type": "array", "elem": ..., "count": N, "head": [first items]} so a vocabulary does not flood
// a script's output.
#pragma once
#include <nlohmann/json.hpp>

#include "formats/metadata.h"

namespace bonsai::cli {

nlohmann::json kv_to_json(const KvValue& v, size_t max_items = 16);

// Prints j on one line; invalid UTF-8 in strings (a tokenizer's byte pieces) is replaced.
void print_json(const nlohmann::json& j);

}  // namespace bonsai::cli
