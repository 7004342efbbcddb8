// Model metadata as typed key/value pairs. The value types are GGUF's (spec §3), so every
// reader (GGUF, .bonsai, safetensors + config.json, llama2.c) produces the same keys a GGUF of
// that model would carry, and every writer can store them unchanged. Order is kept.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

namespace bonsai {

enum class KvType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, U64 = 10, I64 = 11, F64 = 12,
};
const char* kv_type_name(KvType t);

// The variant index of a scalar equals its GGUF type id (ARRAY's slot holds std::monostate).
using KvScalar = std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float, bool,
                              std::string, std::monostate, uint64_t, int64_t, double>;

struct KvArray {
  KvType elem = KvType::U8;
  std::vector<KvScalar> items;
};

struct KvValue {
  KvType type = KvType::U8;
  KvScalar scalar;  // unless type == ARRAY
  KvArray array;    // when type == ARRAY

  static KvValue of(KvScalar s);
  static KvValue of_array(KvType elem, std::vector<KvScalar> items);
  bool operator==(const KvValue& o) const;
};

class Metadata {
 public:
  // Replaces an existing key in place (keeps its position), else appends.
  void set(const std::string& key, KvValue v);
  void set_u32(const std::string& key, uint32_t v) { set(key, KvValue::of(v)); }
  void set_i32(const std::string& key, int32_t v) { set(key, KvValue::of(v)); }
  void set_f32(const std::string& key, float v) { set(key, KvValue::of(v)); }
  void set_bool(const std::string& key, bool v) { set(key, KvValue::of(v)); }
  void set_str(const std::string& key, std::string v) { set(key, KvValue::of(std::move(v))); }
  void set_strings(const std::string& key, std::vector<std::string> v);
  void set_i32s(const std::string& key, const std::vector<int32_t>& v);
  void set_f32s(const std::string& key, const std::vector<float>& v);
  bool erase(const std::string& key);

  const KvValue* find(const std::string& key) const;
  bool has(const std::string& key) const { return find(key) != nullptr; }

  // Typed getters: nullopt when absent; an Error naming the key when present with a type that
  // cannot be read as the asked one (integers convert when the value fits).
  std::optional<int64_t> get_int(const std::string& key) const;
  std::optional<double> get_float(const std::string& key) const;
  std::optional<bool> get_bool(const std::string& key) const;
  std::optional<std::string> get_str(const std::string& key) const;
  std::optional<std::vector<std::string>> get_strings(const std::string& key) const;
  std::optional<std::vector<int64_t>> get_ints(const std::string& key) const;
  std::optional<std::vector<double>> get_floats(const std::string& key) const;

  const std::vector<std::pair<std::string, KvValue>>& items() const { return items_; }
  size_t size() const { return items_.size(); }
  bool operator==(const Metadata& o) const { return items_ == o.items_; }

 private:
  std::vector<std::pair<std::string, KvValue>> items_;
  std::unordered_map<std::string, size_t> index_;
};

// Human-readable value, long arrays abbreviated to their first `max_items` items.
std::string kv_to_string(const KvValue& v, size_t max_items = 8);

}  // namespace bonsai
