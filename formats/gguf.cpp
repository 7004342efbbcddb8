#include "formats/gguf.h"

#include <bit>
#include <cstring>
#include <unordered_set>
#include <vector>

#include "formats/error.h"
#include "formats/kv_codec.h"
#include "formats/mapped_file.h"

namespace bonsai {
namespace {

// The KV encoding (strings, typed pairs, bounds) is kv_codec's; this file adds GGUF's header,
// tensor infos and data layout.
constexpr uint8_t kMagic[4] = {'G', 'G', 'U', 'F'};
constexpr uint32_t kVersion = 3;
constexpr uint32_t kDefaultAlignment = 32;
constexpr uint64_t kMaxNameBytes = 63;  // ggml's GGML_MAX_NAME (64) minus the terminator
constexpr uint32_t kMaxDims = 4;        // GGML_MAX_DIMS
const char* const kAlignmentKey = "general.alignment";

// Smallest tensor info: a name length (8), n_dims (4), one ne (8), a type (4) and an offset (8).
// It bounds the tensor count by the bytes that follow before anything is allocated for it.
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;

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

}  // namespace

TensorSet read_gguf(const std::string& path) {
  auto map = MappedFile::open(path);
  // GGUF does not record where its sections end: every read is bounded by the end of the file,
  // and the reader names the section it is in.
  KvReader r(path, "header", map->data(), map->size(), 0, "file");
  TensorSet set;
  set.path = path;
  set.format = "gguf";

  // ---- header ----
  const uint8_t* magic = r.bytes(4, "the magic");
  if (std::memcmp(magic, kMagic, 4) != 0) fail(path, "not a GGUF file (the first 4 bytes are not \"GGUF\")");
  const uint32_t version = r.u32("the version");
  // A big-endian file has its version in the high bytes when read little-endian.
  if (version != 0 && (version & 0xFFFFu) == 0)
    fail(path, "big-endian GGUF (version ", __builtin_bswap32(version), ") is not supported");
  // v2 and v3 share the little-endian layout and KV encoding (v3 only added big-endian files);
  // v1 had 32-bit counts and lengths.
  if (version != 2 && version != kVersion)
    fail(path, "unsupported GGUF version ", version, " (expected 3; 2 is read too)");
  const uint64_t n_tensors = r.u64("the tensor count");
  const uint64_t n_kv = r.u64("the metadata count");
  r.check_count(n_kv, kMinKvPairBytes, cat("the header's list of ", n_kv, " metadata pairs"));

  // ---- metadata ----
  r.enter("metadata");
  set.meta = r.metadata(n_kv);
  const uint64_t align = alignment_of(set.meta, path);

  // ---- tensor infos ----
  r.enter("tensor infos");
  r.check_count(n_tensors, kMinTensorInfoBytes, cat("the header's table of ", n_tensors, " tensors"));
  // ggml requires each offset to be the running sum of the preceding tensors' padded sizes.
  uint64_t expected_offset = 0;
  std::vector<uint64_t> offsets;
  offsets.reserve(size_t(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    Tensor t;
    t.name = r.str(cat("the name of tensor info ", i));
    if (t.name.size() > kMaxNameBytes)
      fail(path, "tensor name '", t.name, "' is ", t.name.size(), " bytes long (ggml's limit is ", kMaxNameBytes, ")");
    const std::string who = cat("tensor '", t.name, "'");
    const uint32_t n_dims = r.u32(cat("the dimension count of ", who));
    if (n_dims < 1 || n_dims > kMaxDims)
      fail(path, who, " has ", n_dims, " dimensions (must be 1 to ", kMaxDims, ")");
    for (uint32_t d = 0; d < n_dims; ++d) {
      const auto ne = int64_t(r.u64(cat("ne[", d, "] of ", who)));
      if (ne < 0) fail(path, who, " has negative ne[", d, "] = ", ne);
      t.ne.push_back(ne);
    }
    const uint32_t type_id = r.u32(cat("the type id of ", who));
    const TypeTraits* tt = find_type(type_id);
    if (!tt) fail(path, who, " has unknown type id ", type_id);
    t.type = tt->id;
    const uint64_t offset = r.u64(cat("the data offset of ", who));

    if (t.ne[0] % tt->block_elems != 0)
      fail(path, who, " has ne[0] = ", t.ne[0], ", not a multiple of ", tt->name,
           "'s block size ", tt->block_elems);
    const auto nbytes = tensor_bytes(t.type, t.ne);
    // Bounding each size by the file keeps the running offset sum below from overflowing.
    if (!nbytes || *nbytes > map->size())
      fail(path, who, " of shape ", t.shape_str(), " and type ", tt->name,
           " would need more bytes than the file has (size ", map->size(), ")");
    t.nbytes = *nbytes;
    if (offset != expected_offset)
      fail(path, who, " has data offset ", offset, ", expected ", expected_offset,
           " (the preceding tensors' sizes, each padded to the alignment ", align, ")");
    expected_offset += pad_up(t.nbytes, align);
    offsets.push_back(offset);
    set.add(std::move(t));  // rejects duplicate names, naming the path
  }

  // ---- data section ----
  const uint64_t data_start = pad_up(r.file_offset(), align);
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

// A table entry the writer can lay out; its data is the caller's business (write() takes bytes).
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
}

}  // namespace

GgufWriter::GgufWriter(std::string path, const Metadata& meta, std::span<const Tensor> table)
    : StreamWriter(std::move(path), table) {
  // Everything is checked (write_metadata checks each value against its type) before the output
  // is created, so a bad input leaves no file at all.
  const std::string& p = this->path();
  const uint64_t align = alignment_of(meta, p);
  std::unordered_set<std::string> names;
  for (const Tensor& t : table) {
    check_tensor(p, t);
    if (!names.insert(t.name).second) fail(p, "duplicate tensor name '", t.name, "'");
  }

  std::vector<uint8_t> head(kMagic, kMagic + 4);
  put_u32(head, kVersion);
  put_u64(head, table.size());
  put_u64(head, meta.size());
  write_metadata(head, meta, p);
  uint64_t offset = 0;  // in the data section
  std::vector<uint64_t> offsets;
  for (const Tensor& t : table) {
    put_string(head, t.name);
    put_u32(head, uint32_t(t.ne.size()));
    for (int64_t d : t.ne) put_u64(head, uint64_t(d));
    put_u32(head, uint32_t(t.type));
    put_u64(head, offset);
    offsets.push_back(offset);
    offset += pad_up(t.nbytes, align);
  }
  // The data section starts at the first aligned byte after the table; the file ends padded.
  const uint64_t data_start = pad_up(head.size(), align);
  for (uint64_t& o : offsets) o += data_start;
  set_layout(std::move(head), std::move(offsets), data_start + offset);
}

void write_gguf(const std::string& path, const Metadata& meta, std::span<const Tensor> tensors) {
  GgufWriter w(path, meta, tensors);
  write_tensors(w, tensors);
}

}  // namespace bonsai
