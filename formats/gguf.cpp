#include "formats/gguf.h"

#include <bit>
#include <cstring>
#include <unordered_set>
#include <vector>

#include "formats/atomic_file.h"
#include "formats/error.h"
#include "formats/mapped_file.h"

namespace bonsai {
namespace {

static_assert(std::endian::native == std::endian::little,
              "GGUF is little-endian; this reader and writer copy scalars as they are in memory");

constexpr uint8_t kMagic[4] = {'G', 'G', 'U', 'F'};
constexpr uint32_t kVersion = 3;
constexpr uint32_t kDefaultAlignment = 32;
constexpr uint64_t kMaxNameBytes = 63;  // ggml's GGML_MAX_NAME (64) minus the terminator
constexpr uint32_t kMaxDims = 4;        // GGML_MAX_DIMS
const char* const kAlignmentKey = "general.alignment";

// Smallest possible encodings, used to bound the counts in the header by the bytes that follow
// before anything is allocated: a KV pair is a key length (8), a type (4) and at least a one-byte
// value; a tensor info is a name length (8), n_dims (4), one ne (8), a type (4) and an offset (8).
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;

// Encoded size of a scalar of the given KV type (strings: their minimum, the length field).
uint64_t scalar_bytes(KvType t) {
  switch (t) {
    case KvType::U8: case KvType::I8: case KvType::BOOL: return 1;
    case KvType::U16: case KvType::I16: return 2;
    case KvType::U32: case KvType::I32: case KvType::F32: return 4;
    case KvType::U64: case KvType::I64: case KvType::F64: case KvType::STRING: return 8;
    case KvType::ARRAY: break;
  }
  return 0;
}

bool valid_kv_type(uint32_t t) { return t <= uint32_t(KvType::F64); }

uint64_t pad_up(uint64_t x, uint64_t align) { return (x + align - 1) / align * align; }

// general.alignment when present (u32, a power of two), else the default. `where` names the file
// the metadata came from or goes to.
uint32_t alignment_of(const Metadata& meta, const std::string& where) {
  const KvValue* v = meta.find(kAlignmentKey);
  if (!v) return kDefaultAlignment;
  if (v->type != KvType::U32)
    fail(where, kAlignmentKey, " must be u32, is ", kv_type_name(v->type));
  const uint32_t a = std::get<uint32_t>(v->scalar);
  if (!std::has_single_bit(a)) fail(where, kAlignmentKey, " = ", a, " is not a power of two");
  return a;
}

// Bounds-checked reads over the mapped bytes. Every read says what it is reading, so a truncated
// or corrupt file is reported as "truncated: <what> at offset N runs past the end ...".
class Cursor {
 public:
  Cursor(const std::string& path, const uint8_t* data, uint64_t size)
      : path_(path), data_(data), size_(size) {}

  uint64_t pos() const { return pos_; }
  uint64_t left() const { return size_ - pos_; }
  // Describes the item being read, appended to truncation messages ("in tensor info 3").
  void context(std::string c) { context_ = std::move(c); }

  [[noreturn]] void truncated(const std::string& what, uint64_t at) const {
    fail(path_, "truncated: ", what, " at offset ", at, " runs past the end of the file (size ", size_,
         ")", context_.empty() ? "" : ", in ", context_);
  }

  void need(uint64_t n, const std::string& what) const {
    if (n > left()) truncated(what, pos_);
  }

  template <typename T>
  T get(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  const uint8_t* bytes(uint64_t n, const std::string& what) {
    need(n, what);
    const uint8_t* p = data_ + pos_;
    pos_ += n;
    return p;
  }

  std::string str(const char* what) {
    const uint64_t at = pos_;
    const auto n = get<uint64_t>(what);
    if (n > left()) truncated(cat(what, " string length ", n), at);
    return std::string(reinterpret_cast<const char*>(bytes(n, what)), size_t(n));
  }

 private:
  const std::string& path_;
  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
  std::string context_;
};

KvScalar read_scalar(Cursor& c, KvType t, const std::string& path, const std::string& key) {
  switch (t) {
    case KvType::U8: return c.get<uint8_t>("u8 value");
    case KvType::I8: return c.get<int8_t>("i8 value");
    case KvType::U16: return c.get<uint16_t>("u16 value");
    case KvType::I16: return c.get<int16_t>("i16 value");
    case KvType::U32: return c.get<uint32_t>("u32 value");
    case KvType::I32: return c.get<int32_t>("i32 value");
    case KvType::F32: return c.get<float>("f32 value");
    case KvType::BOOL: {
      // Only 0 and 1 are written by ggml; anything else would not survive a rewrite unchanged.
      const auto b = c.get<uint8_t>("bool value");
      if (b > 1) fail(path, "metadata key '", key, "': bool value ", int(b), " is neither 0 nor 1");
      return b == 1;
    }
    case KvType::STRING: return c.str("value");
    case KvType::U64: return c.get<uint64_t>("u64 value");
    case KvType::I64: return c.get<int64_t>("i64 value");
    case KvType::F64: return c.get<double>("f64 value");
    case KvType::ARRAY: break;
  }
  fail(path, "metadata key '", key, "': unexpected nested array");
}

KvValue read_value(Cursor& c, const std::string& path, const std::string& key) {
  const auto type_id = c.get<uint32_t>("value type");
  if (!valid_kv_type(type_id)) fail(path, "metadata key '", key, "' has unknown value type ", type_id);
  const auto type = KvType(type_id);
  if (type != KvType::ARRAY) return KvValue::of(read_scalar(c, type, path, key));

  const auto elem_id = c.get<uint32_t>("array element type");
  if (!valid_kv_type(elem_id))
    fail(path, "metadata key '", key, "' is an array of unknown element type ", elem_id);
  const auto elem = KvType(elem_id);
  if (elem == KvType::ARRAY) fail(path, "metadata key '", key, "' is a nested array (not supported by GGUF readers)");
  const uint64_t at = c.pos();
  const auto n = c.get<uint64_t>("array length");
  // Each element takes at least scalar_bytes(elem) bytes: bound the count before reserving.
  if (n > c.left() / scalar_bytes(elem)) c.truncated(cat("array of ", n, " ", kv_type_name(elem), " elements"), at);
  std::vector<KvScalar> items;
  items.reserve(size_t(n));
  for (uint64_t i = 0; i < n; ++i) items.push_back(read_scalar(c, elem, path, key));
  return KvValue::of_array(elem, std::move(items));
}

}  // namespace

TensorSet read_gguf(const std::string& path) {
  auto map = MappedFile::open(path);
  Cursor c(path, map->data(), map->size());
  TensorSet set;
  set.path = path;
  set.format = "gguf";

  // ---- header ----
  const uint8_t* magic = c.bytes(4, "magic");
  if (std::memcmp(magic, kMagic, 4) != 0) fail(path, "not a GGUF file (the first 4 bytes are not \"GGUF\")");
  const auto version = c.get<uint32_t>("version");
  // A big-endian file has its version in the high bytes when read little-endian.
  if (version != 0 && (version & 0xFFFFu) == 0)
    fail(path, "big-endian GGUF (version ", __builtin_bswap32(version), ") is not supported");
  // v2 and v3 share the little-endian layout (v3 only added big-endian files); v1 had 32-bit counts.
  if (version != 2 && version != kVersion)
    fail(path, "unsupported GGUF version ", version, " (expected 3; 2 is read too)");
  const auto n_tensors = c.get<uint64_t>("tensor count");
  const auto n_kv = c.get<uint64_t>("metadata count");
  if (n_kv > c.left() / kMinKvBytes || n_tensors > c.left() / kMinTensorInfoBytes ||
      n_kv * kMinKvBytes + n_tensors * kMinTensorInfoBytes > c.left())
    fail(path, "truncated: header declares ", n_kv, " metadata pairs and ", n_tensors,
         " tensors, more than the remaining ", c.left(), " bytes can hold (file size ", map->size(), ")");

  // ---- metadata ----
  for (uint64_t i = 0; i < n_kv; ++i) {
    c.context(cat("metadata pair ", i));
    std::string key = c.str("key");
    if (set.meta.has(key)) fail(path, "duplicate metadata key '", key, "'");
    c.context(cat("metadata key '", key, "'"));
    KvValue v = read_value(c, path, key);
    set.meta.set(key, std::move(v));
  }
  const uint64_t align = alignment_of(set.meta, path);

  // ---- tensor infos ----
  // ggml requires each offset to be the running sum of the preceding tensors' padded sizes.
  uint64_t expected_offset = 0;
  std::vector<uint64_t> offsets;
  offsets.reserve(size_t(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    c.context(cat("tensor info ", i));
    Tensor t;
    t.name = c.str("tensor name");
    if (t.name.size() > kMaxNameBytes)
      fail(path, "tensor name '", t.name, "' is ", t.name.size(), " bytes long (ggml's limit is ", kMaxNameBytes, ")");
    c.context(cat("tensor '", t.name, "'"));
    const auto n_dims = c.get<uint32_t>("n_dims");
    if (n_dims < 1 || n_dims > kMaxDims)
      fail(path, "tensor '", t.name, "' has ", n_dims, " dimensions (must be 1 to ", kMaxDims, ")");
    for (uint32_t d = 0; d < n_dims; ++d) {
      const auto ne = c.get<int64_t>("ne");
      if (ne < 0) fail(path, "tensor '", t.name, "' has negative ne[", d, "] = ", ne);
      t.ne.push_back(ne);
    }
    const auto type_id = c.get<uint32_t>("type id");
    const TypeTraits* tt = find_type(type_id);
    if (!tt) fail(path, "tensor '", t.name, "' has unknown type id ", type_id);
    t.type = tt->id;
    const auto offset = c.get<uint64_t>("data offset");

    if (t.ne[0] % tt->block_elems != 0)
      fail(path, "tensor '", t.name, "' has ne[0] = ", t.ne[0], ", not a multiple of ", tt->name,
           "'s block size ", tt->block_elems);
    const auto nbytes = tensor_bytes(t.type, t.ne);
    // Bounding each size by the file keeps the running offset sum below from overflowing.
    if (!nbytes || *nbytes > map->size())
      fail(path, "tensor '", t.name, "' of shape ", t.shape_str(), " and type ", tt->name,
           " would need more bytes than the file has (size ", map->size(), ")");
    t.nbytes = *nbytes;
    if (offset != expected_offset)
      fail(path, "tensor '", t.name, "' has data offset ", offset, ", expected ", expected_offset,
           " (the preceding tensors' sizes, each padded to the alignment ", align, ")");
    expected_offset += pad_up(t.nbytes, align);
    offsets.push_back(offset);
    set.add(std::move(t));  // rejects duplicate names, naming the path
  }
  c.context({});

  // ---- data section ----
  const uint64_t data_start = pad_up(c.pos(), align);
  for (size_t i = 0; i < set.tensors.size(); ++i) {
    Tensor& t = set.tensors[i];
    // data_start <= size + align and offsets/sizes are bounded by the running sum above: no overflow.
    if (data_start > map->size() || offsets[i] > map->size() - data_start ||
        t.nbytes > map->size() - data_start - offsets[i])
      fail(path, "tensor '", t.name, "' data (", t.nbytes, " bytes at offset ", offsets[i],
           " of the data section starting at ", data_start, ") runs past the end of the file (size ",
           map->size(), ")");
    t.data = map->data() + data_start + offsets[i];
  }
  set.keep(map);
  return set;
}

namespace {

// Little-endian byte buffer for everything before the data section.
struct Bytes {
  std::vector<uint8_t> buf;
  template <typename T>
  void put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    buf.insert(buf.end(), p, p + sizeof(T));
  }
  void put_str(const std::string& s) {
    put<uint64_t>(s.size());
    buf.insert(buf.end(), s.begin(), s.end());
  }
};

void put_scalar(Bytes& b, const KvScalar& s) {
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::string>) b.put_str(x);
        else if constexpr (std::is_same_v<T, bool>) b.put<uint8_t>(x ? 1 : 0);
        else if constexpr (!std::is_same_v<T, std::monostate>) b.put<T>(x);
      },
      s);
}

// A KvValue is built by hand by callers: make sure the variant holds what the type field says
// before encoding it, or the file would lie about its own layout.
void check_value(const std::string& path, const std::string& key, const KvValue& v) {
  if (!valid_kv_type(uint32_t(v.type))) fail(path, "metadata key '", key, "' has invalid type ", uint32_t(v.type));
  if (v.type != KvType::ARRAY) {
    if (v.scalar.index() != size_t(v.type))
      fail(path, "metadata key '", key, "' is declared ", kv_type_name(v.type), " but holds another type");
    return;
  }
  if (!valid_kv_type(uint32_t(v.array.elem)) || v.array.elem == KvType::ARRAY)
    fail(path, "metadata key '", key, "' is an array of invalid element type ", uint32_t(v.array.elem));
  for (const auto& s : v.array.items)
    if (s.index() != size_t(v.array.elem))
      fail(path, "metadata key '", key, "' is declared an array of ", kv_type_name(v.array.elem),
           " but holds another type");
}

void check_tensor(const std::string& path, const Tensor& t) {
  if (t.name.size() > kMaxNameBytes)
    fail(path, "tensor name '", t.name, "' is ", t.name.size(), " bytes long (ggml's limit is ", kMaxNameBytes, ")");
  if (t.ne.empty() || t.ne.size() > kMaxDims)
    fail(path, "tensor '", t.name, "' has ", t.ne.size(), " dimensions (must be 1 to ", kMaxDims, ")");
  const TypeTraits* tt = find_type(uint32_t(t.type));
  if (!tt) fail(path, "tensor '", t.name, "' has unknown type id ", uint32_t(t.type));
  for (int64_t d : t.ne)
    if (d < 0) fail(path, "tensor '", t.name, "' has a negative dimension in ", t.shape_str());
  if (t.ne[0] % tt->block_elems != 0)
    fail(path, "tensor '", t.name, "' has ne[0] = ", t.ne[0], ", not a multiple of ", tt->name,
         "'s block size ", tt->block_elems);
  const auto nbytes = tensor_bytes(t.type, t.ne);
  if (!nbytes) fail(path, "tensor '", t.name, "' of shape ", t.shape_str(), " overflows 64-bit sizes");
  if (*nbytes != t.nbytes)
    fail(path, "tensor '", t.name, "' holds ", t.nbytes, " bytes, but ", tt->name, " ", t.shape_str(),
         " needs ", *nbytes);
  if (t.nbytes > 0 && !t.data) fail(path, "tensor '", t.name, "' has no data");
}

}  // namespace

void write_gguf(const std::string& path, const Metadata& meta, std::span<const Tensor> tensors) {
  // Everything is checked before the output is created, so a bad input leaves no file at all.
  const uint64_t align = alignment_of(meta, path);
  for (const auto& [key, v] : meta.items()) check_value(path, key, v);
  std::unordered_set<std::string> names;
  for (const Tensor& t : tensors) {
    check_tensor(path, t);
    if (!names.insert(t.name).second) fail(path, "duplicate tensor name '", t.name, "'");
  }

  Bytes b;
  b.buf.insert(b.buf.end(), kMagic, kMagic + 4);
  b.put<uint32_t>(kVersion);
  b.put<uint64_t>(tensors.size());
  b.put<uint64_t>(meta.size());
  for (const auto& [key, v] : meta.items()) {
    b.put_str(key);
    b.put<uint32_t>(uint32_t(v.type));
    if (v.type != KvType::ARRAY) {
      put_scalar(b, v.scalar);
      continue;
    }
    b.put<uint32_t>(uint32_t(v.array.elem));
    b.put<uint64_t>(v.array.items.size());
    for (const auto& s : v.array.items) put_scalar(b, s);
  }
  uint64_t offset = 0;
  for (const Tensor& t : tensors) {
    b.put_str(t.name);
    b.put<uint32_t>(uint32_t(t.ne.size()));
    for (int64_t d : t.ne) b.put<int64_t>(d);
    b.put<uint32_t>(uint32_t(t.type));
    b.put<uint64_t>(offset);
    offset += pad_up(t.nbytes, align);
  }

  AtomicFile out(path);
  out.write(b.buf.data(), b.buf.size());
  out.pad_to(align);
  for (const Tensor& t : tensors) {
    out.write(t.data, t.nbytes);
    out.pad_to(align);
  }
  out.commit();
}

}  // namespace bonsai
