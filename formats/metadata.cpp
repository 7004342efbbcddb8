#include "formats/metadata.h"

#include <cmath>
#include <sstream>

#include "formats/error.h"

namespace bonsai {

const char* kv_type_name(KvType t) {
  static const char* const names[] = {"u8",  "i8",     "u16",   "i16", "u32", "i32", "f32",
                                      "bool", "string", "array", "u64", "i64", "f64"};
  const auto i = uint32_t(t);
  return i < 13 ? names[i] : "?";
}

KvValue KvValue::of(KvScalar s) {
  KvValue v;
  v.type = KvType(s.index());
  v.scalar = std::move(s);
  return v;
}

KvValue KvValue::of_array(KvType elem, std::vector<KvScalar> items) {
  KvValue v;
  v.type = KvType::ARRAY;
  v.array.elem = elem;
  v.array.items = std::move(items);
  return v;
}

bool KvValue::operator==(const KvValue& o) const {
  if (type != o.type) return false;
  if (type == KvType::ARRAY) return array.elem == o.array.elem && array.items == o.array.items;
  return scalar == o.scalar;
}

void Metadata::set(const std::string& key, KvValue v) {
  auto it = index_.find(key);
  if (it != index_.end()) {
    items_[it->second].second = std::move(v);
    return;
  }
  index_.emplace(key, items_.size());
  items_.emplace_back(key, std::move(v));
}

void Metadata::set_strings(const std::string& key, std::vector<std::string> v) {
  std::vector<KvScalar> items;
  items.reserve(v.size());
  for (auto& s : v) items.emplace_back(std::move(s));
  set(key, KvValue::of_array(KvType::STRING, std::move(items)));
}

void Metadata::set_i32s(const std::string& key, const std::vector<int32_t>& v) {
  set(key, KvValue::of_array(KvType::I32, std::vector<KvScalar>(v.begin(), v.end())));
}

void Metadata::set_f32s(const std::string& key, const std::vector<float>& v) {
  set(key, KvValue::of_array(KvType::F32, std::vector<KvScalar>(v.begin(), v.end())));
}

bool Metadata::erase(const std::string& key) {
  auto it = index_.find(key);
  if (it == index_.end()) return false;
  items_.erase(items_.begin() + ptrdiff_t(it->second));
  index_.clear();
  for (size_t i = 0; i < items_.size(); ++i) index_.emplace(items_[i].first, i);
  return true;
}

const KvValue* Metadata::find(const std::string& key) const {
  auto it = index_.find(key);
  return it == index_.end() ? nullptr : &items_[it->second].second;
}

namespace {

std::optional<int64_t> scalar_int(const KvScalar& s) {
  return std::visit(
      [](const auto& x) -> std::optional<int64_t> {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, bool>) return int64_t(x);
        else if constexpr (std::is_same_v<T, uint64_t>) {
          if (x > uint64_t(INT64_MAX)) return std::nullopt;
          return int64_t(x);
        } else if constexpr (std::is_integral_v<T>) return int64_t(x);
        else return std::nullopt;
      },
      s);
}

std::optional<double> scalar_float(const KvScalar& s) {
  return std::visit(
      [](const auto& x) -> std::optional<double> {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) return double(x);
        else return std::nullopt;
      },
      s);
}

[[noreturn]] void wrong_type(const std::string& key, const KvValue& v, const char* want) {
  throw Error(cat("metadata key '", key, "' is ", kv_type_name(v.type),
                  v.type == KvType::ARRAY ? cat(" of ", kv_type_name(v.array.elem)) : std::string(),
                  ", expected ", want));
}

}  // namespace

std::optional<int64_t> Metadata::get_int(const std::string& key) const {
  const KvValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != KvType::ARRAY && v->type != KvType::BOOL)
    if (auto i = scalar_int(v->scalar)) return i;
  wrong_type(key, *v, "an integer");
}

std::optional<double> Metadata::get_float(const std::string& key) const {
  const KvValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != KvType::ARRAY)
    if (auto f = scalar_float(v->scalar)) return f;
  wrong_type(key, *v, "a number");
}

std::optional<bool> Metadata::get_bool(const std::string& key) const {
  const KvValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type == KvType::BOOL) return std::get<bool>(v->scalar);
  wrong_type(key, *v, "bool");
}

std::optional<std::string> Metadata::get_str(const std::string& key) const {
  const KvValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type == KvType::STRING) return std::get<std::string>(v->scalar);
  wrong_type(key, *v, "string");
}

std::optional<std::vector<std::string>> Metadata::get_strings(const std::string& key) const {
  const KvValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != KvType::ARRAY || v->array.elem != KvType::STRING) wrong_type(key, *v, "array of string");
  std::vector<std::string> out;
  out.reserve(v->array.items.size());
  for (const auto& s : v->array.items) out.push_back(std::get<std::string>(s));
  return out;
}

std::optional<std::vector<int64_t>> Metadata::get_ints(const std::string& key) const {
  const KvValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != KvType::ARRAY) wrong_type(key, *v, "array of integers");
  std::vector<int64_t> out;
  out.reserve(v->array.items.size());
  for (const auto& s : v->array.items) {
    auto i = scalar_int(s);
    if (!i) wrong_type(key, *v, "array of integers");
    out.push_back(*i);
  }
  return out;
}

std::optional<std::vector<double>> Metadata::get_floats(const std::string& key) const {
  const KvValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != KvType::ARRAY) wrong_type(key, *v, "array of numbers");
  std::vector<double> out;
  out.reserve(v->array.items.size());
  for (const auto& s : v->array.items) {
    auto f = scalar_float(s);
    if (!f) wrong_type(key, *v, "array of numbers");
    out.push_back(*f);
  }
  return out;
}

namespace {
void put_scalar(std::ostream& os, const KvScalar& s) {
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::string>) {
          os << '"';
          for (char c : x.substr(0, 120)) {
            if (c == '\n') os << "\\n";
            else if (c == '"') os << "\\\"";
            else os << c;
          }
          if (x.size() > 120) os << "...";
          os << '"';
        } else if constexpr (std::is_same_v<T, bool>) os << (x ? "true" : "false");
        else if constexpr (std::is_same_v<T, std::monostate>) os << "?";
        else if constexpr (sizeof(T) == 1) os << int(x);
        else os << x;
      },
      s);
}
}  // namespace

std::string kv_to_string(const KvValue& v, size_t max_items) {
  std::ostringstream os;
  if (v.type != KvType::ARRAY) {
    put_scalar(os, v.scalar);
    return os.str();
  }
  os << '[';
  const size_t n = v.array.items.size();
  for (size_t i = 0; i < n && i < max_items; ++i) {
    if (i) os << ", ";
    put_scalar(os, v.array.items[i]);
  }
  if (n > max_items) os << ", ... (" << n << " " << kv_type_name(v.array.elem) << ")";
  os << ']';
  return os.str();
}

}  // namespace bonsai
