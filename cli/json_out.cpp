#include "cli/json_out.h"

#include <iostream>

namespace bonsai::cli {

namespace {
nlohmann::json scalar(const KvScalar& s) {
  return std::visit(
      [](const auto& x) -> nlohmann::json {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::monostate>) return nullptr;
        else return x;
      },
      s);
}
}  // namespace

nlohmann::json kv_to_json(const KvValue& v, size_t max_items) {
  if (v.type != KvType::ARRAY) return scalar(v.scalar);
  const auto& items = v.array.items;
  nlohmann::json arr = nlohmann::json::array();
  for (size_t i = 0; i < items.size() && i < max_items; ++i) arr.push_back(scalar(items[i]));
  if (items.size() <= max_items) return arr;
  return {{"type", "array"}, {"elem", kv_type_name(v.array.elem)}, {"count", items.size()}, {"head", arr}};
}

void print_json(const nlohmann::json& j) {
  std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
}

}  // namespace bonsai::cli
