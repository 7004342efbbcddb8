#include "quantize/weight_error.h"

#include <bit>

#include "formats/error.h"

namespace bonsai::quant {

nlohmann::ordered_json checkpoint_json(const WeightError& e) {
  auto bits = [](double d) { return std::bit_cast<uint64_t>(d); };
  nlohmann::ordered_json j;
  j["name"] = e.name;
  j["type"] = traits(e.type).name;
  j["method"] = e.method ? nlohmann::ordered_json(method_name(*e.method)) : nullptr;
  j["rel_error"] = bits(e.rel_error);
  j["gram"] = e.gram;
  j["stage1_error"] = e.stage1_error ? nlohmann::ordered_json(bits(*e.stage1_error)) : nullptr;
  j["plus2_share"] = bits(e.plus2_share);
  j["elements"] = e.elements;
  j["grid_error"] = e.grid_error ? nlohmann::ordered_json(bits(*e.grid_error)) : nullptr;
  j["residual_bytes"] = e.residual_bytes;
  return j;
}

WeightError weight_error_from(const nlohmann::ordered_json& j, const std::string& path) {
  auto num = [](const nlohmann::ordered_json& v) { return std::bit_cast<double>(v.get<uint64_t>()); };
  WeightError e;
  try {
    e.name = j.at("name").get<std::string>();
    const TypeTraits* tt = find_type(j.at("type").get<std::string>());
    if (!tt) fail(path, "unknown type '", j.at("type").get<std::string>(), "' for '", e.name, "'");
    e.type = tt->id;
    if (!j.at("method").is_null()) e.method = parse_method(j.at("method").get<std::string>());
    e.rel_error = num(j.at("rel_error"));
    e.gram = j.at("gram").get<bool>();
    if (!j.at("stage1_error").is_null()) e.stage1_error = num(j.at("stage1_error"));
    e.plus2_share = num(j.at("plus2_share"));
    e.elements = j.at("elements").get<int64_t>();
    if (!j.at("grid_error").is_null()) e.grid_error = num(j.at("grid_error"));
    e.residual_bytes = j.at("residual_bytes").get<uint64_t>();
  } catch (const nlohmann::json::exception& x) {
    fail(path, "a weight error entry is malformed: ", x.what());
  }
  return e;
}

std::string layer_errors_json(const std::vector<WeightError>& errors) {
  nlohmann::ordered_json errs = nlohmann::ordered_json::object();
  for (const auto& e : errors) {
    nlohmann::ordered_json j;
    j["type"] = traits(e.type).name;
    if (e.method) j["method"] = method_name(*e.method);
    j["rel_output_error"] = e.rel_error;
    if (e.stage1_error) j["stage1_rel_output_error"] = *e.stage1_error, j["plus2_share"] = e.plus2_share;
    if (e.grid_error) j["grid_rel_output_error"] = *e.grid_error, j["residual_bytes"] = e.residual_bytes;
    j["measure"] = e.gram ? "gram" : "importance";
    errs[e.name] = j;
  }
  return errs.dump();
}

}  // namespace bonsai::quant
