#include "runtime/hadamard.h"

#include <cmath>

#include "formats/error.h"

namespace bonsai {

namespace {
constexpr const char* kPrefix = "prism.hadamard.";
std::string key(const char* k) { return std::string(kPrefix) + k; }
}  // namespace

HadamardSpec read_hadamard(const Metadata& meta, const std::string& path) {
  HadamardSpec s;
  const auto version = meta.get_int(key("version"));
  if (!version) return s;
  if (*version != 1 && *version != 2) fail(path, "prism.hadamard.version ", *version, " is not supported (1 or 2)");
  if (*version == 2) fail(path, "prism.hadamard.version 2 (tied rotated output) is not supported by this runtime");
  const auto block = meta.get_int(key("block_size"));
  if (!block || *block <= 0 || (*block & (*block - 1)) != 0)
    fail(path, "prism.hadamard.block_size must be a power of two");
  s.block = *block;
  if (meta.get_str(key("transform")).value_or("") != "normalized-sylvester-walsh-hadamard")
    fail(path, "prism.hadamard.transform must be 'normalized-sylvester-walsh-hadamard'");
  if (meta.get_str(key("axis")).value_or("") != "input-last-dimension")
    fail(path, "prism.hadamard.axis must be 'input-last-dimension'");
  const std::string mode = meta.get_str(key("sign_mode")).value_or("");
  if (mode == "explicit") {
    const auto widths = meta.get_ints(key("sign_widths"));
    const auto values = meta.get_ints(key("sign_values"));
    if (!widths || !values) fail(path, "explicit sign mode needs prism.hadamard.sign_widths and sign_values");
    int64_t total = 0;
    for (int64_t w : *widths) {
      if (w <= 0 || w % s.block) fail(path, "prism.hadamard sign width ", w, " is not a multiple of ", s.block);
      if (s.signs.count(w)) fail(path, "prism.hadamard sign width ", w, " appears twice");
      if (total + w > int64_t(values->size())) fail(path, "prism.hadamard.sign_values is shorter than the widths");
      std::vector<float> v(static_cast<size_t>(w));
      for (int64_t i = 0; i < w; ++i) {
        const int64_t x = (*values)[size_t(total + i)];
        if (x != 1 && x != -1) fail(path, "prism.hadamard.sign_values holds ", x, " (must be +1 or -1)");
        v[size_t(i)] = float(x);
      }
      s.signs.emplace(w, std::move(v));
      total += w;
    }
    if (total != int64_t(values->size())) fail(path, "prism.hadamard.sign_values is longer than the widths");
  } else if (mode != "identity") {
    fail(path, "prism.hadamard.sign_mode must be 'identity' or 'explicit'");
  }
  const auto names = meta.get_strings(key("weight_names"));
  if (!names || names->empty()) fail(path, "prism.hadamard.weight_names must list the rotated weights");
  s.weights.insert(names->begin(), names->end());
  if (auto inv = meta.get_strings(key("inverse_weight_names")))
    for (const auto& n : *inv) {
      if (n != "token_embd.weight") fail(path, "prism.hadamard.inverse_weight_names: only token_embd.weight is accepted");
      s.inverse_weights.insert(n);
    }
  if (meta.get_bool(key("gdn_v_grouped")).value_or(false))
    fail(path, "prism.hadamard.gdn_v_grouped applies to gated-DeltaNet models, which this runtime does not run");
  return s;
}

void write_hadamard(const HadamardSpec& s, Metadata& meta) {
  meta.set_u32(key("version"), 1);
  meta.set_u32(key("block_size"), uint32_t(s.block));
  meta.set_str(key("transform"), "normalized-sylvester-walsh-hadamard");
  meta.set_str(key("axis"), "input-last-dimension");
  meta.set_str(key("sign_mode"), s.signs.empty() ? "identity" : "explicit");
  if (!s.signs.empty()) {
    std::vector<int32_t> widths, values;
    for (const auto& [w, v] : s.signs) {
      widths.push_back(int32_t(w));
      for (float x : v) values.push_back(x > 0 ? 1 : -1);
    }
    meta.set_i32s(key("sign_widths"), widths);
    meta.set_i32s(key("sign_values"), values);
  }
  meta.set_strings(key("weight_names"), {s.weights.begin(), s.weights.end()});
  if (!s.inverse_weights.empty())
    meta.set_strings(key("inverse_weight_names"), {s.inverse_weights.begin(), s.inverse_weights.end()});
}

void fwht(float* x, int64_t b) {
  for (int64_t h = 1; h < b; h *= 2)
    for (int64_t i = 0; i < b; i += 2 * h)
      for (int64_t j = i; j < i + h; ++j) {
        const float a = x[j], c = x[j + h];
        x[j] = a + c;
        x[j + h] = a - c;
      }
  const float norm = 1.0f / std::sqrt(float(b));
  for (int64_t i = 0; i < b; ++i) x[i] *= norm;
}

namespace {
const std::vector<float>* signs_for(const HadamardSpec& s, int64_t k) {
  if (s.signs.empty()) return nullptr;
  auto it = s.signs.find(k);
  if (it == s.signs.end()) throw Error(cat("no prism.hadamard sign vector of width ", k));
  return &it->second;
}
}  // namespace

void hadamard_forward(const HadamardSpec& s, float* x, int64_t n, int64_t k) {
  const auto* sg = signs_for(s, k);
  for (int64_t r = 0; r < n; ++r) {
    float* row = x + r * k;
    if (sg)
      for (int64_t i = 0; i < k; ++i) row[i] *= (*sg)[size_t(i)];
    for (int64_t o = 0; o < k; o += s.block) fwht(row + o, s.block);
  }
}

void hadamard_inverse(const HadamardSpec& s, float* z, int64_t n, int64_t k) {
  const auto* sg = signs_for(s, k);
  for (int64_t r = 0; r < n; ++r) {
    float* row = z + r * k;
    for (int64_t o = 0; o < k; o += s.block) fwht(row + o, s.block);
    if (sg)
      for (int64_t i = 0; i < k; ++i) row[i] *= (*sg)[size_t(i)];
  }
}

}  // namespace bonsai
