#include "formats/kv_codec.h"

#include <cstring>
#include <type_traits>

#include "formats/error.h"

namespace bonsai {
namespace {

template <typename T>
void put_raw(std::vector<uint8_t>& out, T v) {
  uint8_t b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.insert(out.end(), b, b + sizeof(T));
}

bool valid_type(uint32_t t) { return t <= uint32_t(KvType::F64); }

// Each element is held as a KvScalar (40 bytes, whatever its encoded size), so a file of N bytes
// could ask for 40 N bytes through one array of u8. The longest arrays real files hold are
// vocabularies and merge lists (a few 10^5); 2^24 elements keeps any one array below ~700 MB.
constexpr uint64_t kMaxArrayItems = uint64_t(1) << 24;

// Smallest encoding of one element of type t: what a count is bounded by before reserving.
uint64_t min_bytes(KvType t) {
  switch (t) {
    case KvType::U8: case KvType::I8: case KvType::BOOL: return 1;
    case KvType::U16: case KvType::I16: return 2;
    case KvType::U32: case KvType::I32: case KvType::F32: return 4;
    case KvType::STRING:  // u64 length
    case KvType::U64: case KvType::I64: case KvType::F64: return 8;
    case KvType::ARRAY: return 12;  // u32 type + u64 count
  }
  return 1;
}

void put_scalar(std::vector<uint8_t>& out, const KvScalar& s) {
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::string>) put_string(out, x);
        else if constexpr (std::is_same_v<T, bool>) out.push_back(x ? 1 : 0);
        else if constexpr (std::is_same_v<T, std::monostate>) {}  // never: checked by caller
        else put_raw(out, x);
      },
      s);
}

}  // namespace

void put_u32(std::vector<uint8_t>& out, uint32_t v) { put_raw(out, v); }
void put_u64(std::vector<uint8_t>& out, uint64_t v) { put_raw(out, v); }

void put_string(std::vector<uint8_t>& out, std::string_view s) {
  put_u64(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

void write_kv(std::vector<uint8_t>& out, const std::string& key, const KvValue& v,
              const std::string& path) {
  // A KvValue is built by hand by callers: check that it holds what its type field says before
  // encoding it, or the file would lie about its own layout.
  if (key.empty()) fail(path, "a metadata key is empty");
  if (!valid_type(uint32_t(v.type)))
    fail(path, "metadata key '", key, "': invalid value type ", uint32_t(v.type));
  if (v.type == KvType::ARRAY) {
    if (v.array.elem == KvType::ARRAY || !valid_type(uint32_t(v.array.elem)))
      fail(path, "metadata key '", key, "': arrays of ", kv_type_name(v.array.elem),
           " cannot be stored (GGUF arrays do not nest)");
    for (const auto& item : v.array.items)
      if (item.index() != size_t(v.array.elem))
        fail(path, "metadata key '", key, "': an item of the array of ",
             kv_type_name(v.array.elem), " holds ", kv_type_name(KvType(item.index())));
  } else if (v.scalar.index() != size_t(v.type)) {
    fail(path, "metadata key '", key, "': declared ", kv_type_name(v.type), " but holds ",
         kv_type_name(KvType(v.scalar.index())));
  }
  put_string(out, key);
  put_u32(out, uint32_t(v.type));
  if (v.type != KvType::ARRAY) {
    put_scalar(out, v.scalar);
    return;
  }
  put_u32(out, uint32_t(v.array.elem));
  put_u64(out, v.array.items.size());
  for (const auto& item : v.array.items) put_scalar(out, item);
}

void write_metadata(std::vector<uint8_t>& out, const Metadata& meta, const std::string& path) {
  for (const auto& [key, value] : meta.items()) write_kv(out, key, value, path);
}

KvReader::KvReader(std::string path, std::string section, const uint8_t* data, uint64_t size,
                   uint64_t base, std::string bound)
    : path_(std::move(path)),
      section_(std::move(section)),
      bound_(bound.empty() ? section_ : std::move(bound)),
      data_(data),
      size_(size),
      base_(base) {}

void KvReader::fail_here(const std::string& what) const {
  fail(path_, section_, " at offset ", file_offset(), ": ", what);
}

void KvReader::need(uint64_t n, std::string_view what) const {
  if (n > remaining())
    fail_here(cat(what, " needs ", n, " bytes but the ", bound_, " has only ", remaining(),
                  " left (truncated or corrupt)"));
}

void KvReader::check_count(uint64_t n, uint64_t min_bytes, std::string_view what) const {
  if (n > remaining() / min_bytes)
    fail_here(cat(what, " does not fit in the ", remaining(), " bytes left (truncated or corrupt)"));
}

const uint8_t* KvReader::bytes(uint64_t n, std::string_view what) {
  need(n, what);
  const uint8_t* p = data_ + pos_;
  pos_ += n;
  return p;
}

uint8_t KvReader::u8(std::string_view what) { return *bytes(1, what); }

uint32_t KvReader::u32(std::string_view what) {
  uint32_t v;
  std::memcpy(&v, bytes(4, what), 4);
  return v;
}

uint64_t KvReader::u64(std::string_view what) {
  uint64_t v;
  std::memcpy(&v, bytes(8, what), 8);
  return v;
}

std::string KvReader::str(std::string_view what) {
  const uint64_t n = u64(what);
  const uint8_t* p = bytes(n, what);  // bounds the length before the string is allocated
  return std::string(reinterpret_cast<const char*>(p), size_t(n));
}

KvScalar KvReader::scalar(KvType type, const std::string& key, const std::string& what) {
  auto raw = [&](auto zero) {
    decltype(zero) v;
    std::memcpy(&v, bytes(sizeof v, what), sizeof v);
    return KvScalar(v);
  };
  switch (type) {
    case KvType::U8: return raw(uint8_t{});
    case KvType::I8: return raw(int8_t{});
    case KvType::U16: return raw(uint16_t{});
    case KvType::I16: return raw(int16_t{});
    case KvType::U32: return raw(uint32_t{});
    case KvType::I32: return raw(int32_t{});
    case KvType::F32: return raw(float{});
    case KvType::U64: return raw(uint64_t{});
    case KvType::I64: return raw(int64_t{});
    case KvType::F64: return raw(double{});
    case KvType::BOOL: {
      const uint8_t b = u8(what);
      if (b > 1) {
        pos_ -= 1;  // point the message at the offending byte
        fail_here(cat("metadata key '", key, "': bool value ", int(b), " is neither 0 nor 1"));
      }
      return KvScalar(b == 1);
    }
    case KvType::STRING: return KvScalar(str(what));
    case KvType::ARRAY: break;
  }
  fail_here(cat("metadata key '", key, "': arrays of arrays are not allowed"));
}

KvValue KvReader::value(KvType type, const std::string& key) {
  // The message is built once per value, not per element: vocabularies hold 10^5 strings.
  const std::string what = cat("the value of metadata key '", key, "'");
  if (type != KvType::ARRAY) return KvValue::of(scalar(type, key, what));
  const uint32_t elem = u32(cat("the element type of metadata key '", key, "'"));
  if (!valid_type(elem) || KvType(elem) == KvType::ARRAY) {
    pos_ -= 4;  // point the message at the element type
    fail_here(cat("metadata key '", key, "': invalid array element type ", elem,
                  KvType(elem) == KvType::ARRAY ? " (a nested array: GGUF arrays do not nest)" : ""));
  }
  const uint64_t count = u64(cat("the length of metadata key '", key, "'"));
  if (count > kMaxArrayItems) {
    pos_ -= 8;  // point the message at the length
    fail_here(cat("metadata key '", key, "': array of ", count, " elements is longer than the ", kMaxArrayItems,
                  " allowed"));
  }
  check_count(count, min_bytes(KvType(elem)),
              cat("metadata key '", key, "': array of ", count, " ", kv_type_name(KvType(elem))));
  std::vector<KvScalar> items;
  items.reserve(size_t(count));
  for (uint64_t i = 0; i < count; ++i) items.push_back(scalar(KvType(elem), key, what));
  return KvValue::of_array(KvType(elem), std::move(items));
}

std::pair<std::string, KvValue> KvReader::kv(uint64_t index) {
  const uint64_t at = pos_;
  std::string key = str(cat("the key of metadata pair ", index));
  if (key.empty()) {
    pos_ = at;
    fail_here(cat("empty metadata key (metadata pair ", index, ")"));
  }
  const uint32_t type = u32(cat("the type of metadata key '", key, "'"));
  if (!valid_type(type)) {
    pos_ -= 4;
    fail_here(cat("metadata key '", key, "': unknown value type ", type));
  }
  KvValue v = value(KvType(type), key);
  return {std::move(key), std::move(v)};
}

Metadata KvReader::metadata(uint64_t n) {
  Metadata meta;
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t at = pos_;
    auto [key, v] = kv(i);
    if (meta.has(key)) {
      pos_ = at;
      fail_here(cat("duplicate metadata key '", key, "'"));
    }
    meta.set(key, std::move(v));
  }
  return meta;
}

}  // namespace bonsai
