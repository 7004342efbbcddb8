// `.bonsai` v1, laid out and checked exactly as docs/formats/bonsai.md says; section numbers
// below refer to that document.
#include "formats/bonsai_file.h"

#include <xxhash.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>
#include <string_view>
#include <unordered_map>

#include "formats/atomic_file.h"
#include "formats/error.h"
#include "formats/kv_codec.h"
#include "formats/mapped_file.h"

namespace bonsai {
namespace {

constexpr uint8_t kMagic[8] = {'B', 'O', 'N', 'S', 'A', 'I', 0x00, 0x1A};
constexpr uint32_t kVersion = 1;
constexpr uint64_t kHeaderBytes = 96;
constexpr uint64_t kChecksumAt = 88;  // the header checksum is the header's last field
constexpr uint32_t kRequiredFlags = 0x0000FFFFu;  // §3.1: unknown bits here refuse the file
constexpr uint32_t kDefaultAlignment = 64;
constexpr uint64_t kMinEntryBytes = 8 + 1 + 4 + 4 + 4 + 8 + 8 + 8 + 8 + 8;  // §5: 61
constexpr int kMaxDims = 4;

// ---- roles and links (§5.1) ----

enum Role : uint32_t { kWeight = 0, kResidualCodebook = 1, kResidualIndex = 2, kGroupParams = 3 };

struct LinkedRole {
  Role role;
  std::string_view suffix, name;
};
constexpr LinkedRole kLinkedRoles[] = {
    {kResidualCodebook, ".rc_codebook", "residual codebook"},
    {kResidualIndex, ".rc_index", "residual index"},
    {kGroupParams, ".group_params", "group parameters"},
};

struct Link {
  uint32_t role = kWeight;
  std::string base;
};

// The role and base a tensor's name implies: the suffix convention is normative.
Link link_of(const std::string& name) {
  for (const auto& r : kLinkedRoles)
    if (name.size() > r.suffix.size() && name.ends_with(r.suffix))
      return {r.role, name.substr(0, name.size() - r.suffix.size())};
  return {};
}

std::string role_name(uint32_t role) {
  if (role == kWeight) return "0 (weight)";
  for (const auto& r : kLinkedRoles)
    if (r.role == role) return cat(role, " (", r.name, ")");
  return cat(role);
}

// ---- small helpers ----

bool valid_alignment(uint64_t a) { return a >= 8 && a <= 65536 && (a & (a - 1)) == 0; }

// a is a power of two; callers bound x by the file size or by data in memory, far from 2^64.
uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) & ~(a - 1); }

std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%016" PRIx64, v);
  return buf;
}

// XXH3-64 of [0, 88) ++ [96, region_size): the header region minus the checksum field (§6).
uint64_t header_checksum(const uint8_t* region, uint64_t region_size) {
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> st(XXH3_createState(), XXH3_freeState);
  if (!st) throw std::bad_alloc();
  XXH3_64bits_reset(st.get());
  XXH3_64bits_update(st.get(), region, kChecksumAt);
  XXH3_64bits_update(st.get(), region + kHeaderBytes, size_t(region_size - kHeaderBytes));
  return XXH3_64bits_digest(st.get());
}

uint64_t data_checksum(const uint8_t* data, uint64_t n) { return XXH3_64bits(data, size_t(n)); }

// ---- reserved keys (§8) ----

enum class KeyKind { kString, kJson, kSha256, kDate, kU32, kStrings };
struct ReservedKey {
  const char* key;
  KeyKind kind;
  bool required;
};
constexpr ReservedKey kReservedKeys[] = {
    {"bonsai.tool_version", KeyKind::kString, true},
    {"bonsai.created", KeyKind::kDate, true},
    {"bonsai.alignment", KeyKind::kU32, false},
    {"bonsai.plan", KeyKind::kJson, false},
    {"bonsai.provenance.source_sha256", KeyKind::kSha256, false},
    {"bonsai.provenance.calib_sha256", KeyKind::kSha256, false},
    {"bonsai.provenance.source", KeyKind::kString, false},
    {"bonsai.quant.layer_errors", KeyKind::kJson, false},
    {"bonsai.calib.manifest", KeyKind::kJson, false},
    {"bonsai.residual.scheme", KeyKind::kString, false},
    {"bonsai.residual.vector_dim", KeyKind::kU32, false},
    {"bonsai.residual.codebook_size", KeyKind::kU32, false},
    {"bonsai.residual.stages", KeyKind::kU32, false},
    {"bonsai.residual.rows_per_codebook", KeyKind::kU32, false},
    {"bonsai.residual.tensors", KeyKind::kJson, false},
    {"bonsai.calib.group_size", KeyKind::kU32, false},
    {"bonsai.calib.params", KeyKind::kStrings, false},
};

bool is_date(const std::string& s) {  // YYYY-MM-DDTHH:MM:SSZ
  static constexpr std::string_view shape = "dddd-dd-ddTdd:dd:ddZ";
  if (s.size() != shape.size()) return false;
  for (size_t i = 0; i < s.size(); ++i)
    if (shape[i] == 'd' ? !(s[i] >= '0' && s[i] <= '9') : s[i] != shape[i]) return false;
  return true;
}

bool is_sha256(const std::string& s) {
  if (s.size() != 64) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

// The writer refuses what the reader would refuse, so both run this.
void check_reserved_keys(const std::string& path, const Metadata& meta) {
  for (const auto& r : kReservedKeys) {
    const KvValue* v = meta.find(r.key);
    if (!v) {
      if (r.required) fail(path, "metadata key '", r.key, "' is missing");
      continue;
    }
    auto wrong = [&](const std::string& what) {
      fail(path, "metadata key '", r.key, "' ", what);
    };
    if (r.kind == KeyKind::kU32) {
      if (v->type != KvType::U32) wrong(cat("is ", kv_type_name(v->type), ", expected u32"));
      continue;
    }
    if (r.kind == KeyKind::kStrings) {
      if (v->type != KvType::ARRAY || v->array.elem != KvType::STRING)
        wrong("is not an array of strings");
      continue;
    }
    if (v->type != KvType::STRING) wrong(cat("is ", kv_type_name(v->type), ", expected string"));
    const auto& s = std::get<std::string>(v->scalar);
    switch (r.kind) {
      case KeyKind::kJson:
        if (!nlohmann::json::accept(s)) wrong("does not hold valid JSON");
        break;
      case KeyKind::kSha256:
        if (!is_sha256(s)) wrong(cat("is '", s, "', expected 64 lowercase hex digits"));
        break;
      case KeyKind::kDate:
        if (!is_date(s)) wrong(cat("is '", s, "', expected YYYY-MM-DDTHH:MM:SSZ (UTC)"));
        break;
      default:
        if (s.empty()) wrong("is empty");
        break;
    }
  }
  if (const KvValue* a = meta.find("bonsai.alignment"); a && !valid_alignment(std::get<uint32_t>(a->scalar)))
    fail(path, "metadata key 'bonsai.alignment' is ", std::get<uint32_t>(a->scalar),
         ", expected a power of two from 8 to 65536");
}

// bonsai.created for a new file: SOURCE_DATE_EPOCH when set (reproducible builds), else now.
std::string creation_time(const std::string& path) {
  int64_t t = int64_t(std::time(nullptr));
  if (const char* e = std::getenv("SOURCE_DATE_EPOCH"); e && *e) {
    constexpr int64_t kLast = 253402300799;  // 9999-12-31T23:59:59Z: the last 4-digit year
    const std::string_view s = e;
    auto bad = [&] { fail(path, "SOURCE_DATE_EPOCH='", s, "' is not a number of seconds up to ", kLast); };
    t = 0;
    for (char c : s) {
      if (c < '0' || c > '9' || t > kLast) bad();  // checked per digit: t stays far from overflow
      t = t * 10 + (c - '0');
    }
    if (t > kLast) bad();
  }
  const std::time_t tt = std::time_t(t);
  std::tm tm{};
  if (!::gmtime_r(&tt, &tm)) fail(path, "cannot convert the time ", t, " to a date");
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// ---- the fixed header (§3) ----

struct Header {
  uint32_t version = kVersion, flags = 0, alignment = kDefaultAlignment, reserved = 0;
  uint64_t n_kv = 0, meta_offset = kHeaderBytes, meta_size = 0, n_tensors = 0, table_offset = 0,
           table_size = 0, data_offset = 0, data_size = 0, checksum = 0;
};

// The 88 bytes before the checksum.
std::vector<uint8_t> encode_header(const Header& h) {
  std::vector<uint8_t> out(kMagic, kMagic + sizeof kMagic);
  for (uint32_t v : {h.version, h.flags, h.alignment, h.reserved}) put_u32(out, v);
  for (uint64_t v : {h.n_kv, h.meta_offset, h.meta_size, h.n_tensors, h.table_offset,
                     h.table_size, h.data_offset, h.data_size})
    put_u64(out, v);
  return out;
}

Header decode_header(KvReader& r) {
  Header h;
  r.bytes(sizeof kMagic, "magic");
  h.version = r.u32("version");
  h.flags = r.u32("flags");
  h.alignment = r.u32("alignment");
  h.reserved = r.u32("reserved");
  h.n_kv = r.u64("n_kv");
  h.meta_offset = r.u64("meta_offset");
  h.meta_size = r.u64("meta_size");
  h.n_tensors = r.u64("n_tensors");
  h.table_offset = r.u64("table_offset");
  h.table_size = r.u64("table_size");
  h.data_offset = r.u64("data_offset");
  h.data_size = r.u64("data_size");
  h.checksum = r.u64("header_checksum");
  return h;
}

// One tensor table entry as stored (§5).
struct Entry {
  Tensor t;
  uint32_t role = kWeight;
  std::string base;
  uint64_t offset = 0, checksum = 0;
};

void check_padding(const std::string& path, const uint8_t* file, uint64_t from, uint64_t to) {
  for (uint64_t i = from; i < to; ++i)
    if (file[i] != 0) fail(path, "padding byte at offset ", i, " is ", int(file[i]), ", not 0");
}

// ---- reading ----

std::vector<Entry> read_table(KvReader& r, const Header& h, const std::string& path) {
  if (h.n_tensors > h.table_size / kMinEntryBytes)
    fail(path, "n_tensors = ", h.n_tensors, " entries cannot fit in the ", h.table_size,
         "-byte tensor table");
  std::vector<Entry> entries;
  entries.reserve(size_t(h.n_tensors));
  uint64_t expected_offset = 0;
  for (uint64_t i = 0; i < h.n_tensors; ++i) {
    Entry e;
    const uint64_t at = r.pos();
    e.t.name = r.str(cat("the name of tensor ", i));
    const std::string& name = e.t.name;
    if (name.empty()) {
      r.fail_here(cat("tensor ", i, " (entry at table offset ", at, ") has an empty name"));
    }
    const std::string who = cat("tensor '", name, "'");
    const uint32_t type = r.u32(cat("the type of ", who));
    const TypeTraits* tt = find_type(type);
    if (!tt) fail(path, who, ": unknown type id ", type);
    e.t.type = tt->id;
    e.role = r.u32(cat("the role of ", who));
    const uint32_t n_dims = r.u32(cat("the dimension count of ", who));
    if (n_dims < 1 || n_dims > kMaxDims)
      fail(path, who, ": ", n_dims, " dimensions, expected 1 to ", kMaxDims);
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t ne = r.u64(cat("the shape of ", who));
      if (ne < 1 || ne > uint64_t(INT64_MAX)) fail(path, who, ": ne[", d, "] = ", ne, " is out of range");
      e.t.ne.push_back(int64_t(ne));
    }
    e.offset = r.u64(cat("the offset of ", who));
    e.t.nbytes = r.u64(cat("the size of ", who));
    e.checksum = r.u64(cat("the checksum of ", who));
    e.base = r.str(cat("the base name of ", who));

    const auto want = tensor_bytes(e.t.type, e.t.ne);
    if (!want) {
      if (e.t.ne[0] % tt->block_elems != 0)
        fail(path, who, ": ne[0] = ", e.t.ne[0], " is not a multiple of ", tt->name,
             "'s block of ", tt->block_elems);
      fail(path, who, ": shape ", e.t.shape_str(), " overflows 64 bits");
    }
    if (e.t.nbytes != *want)
      fail(path, who, ": size ", e.t.nbytes, " bytes, but ", tt->name, " ", e.t.shape_str(),
           " takes ", *want);
    if (e.offset != expected_offset)
      fail(path, who, ": data offset ", e.offset, ", expected ", expected_offset,
           " (tensors are stored in table order, each aligned to ", h.alignment, ")");
    if (e.t.nbytes > h.data_size || e.offset > h.data_size - e.t.nbytes)
      fail(path, who, ": bytes [", e.offset, ", +", e.t.nbytes, ") extend past the ",
           h.data_size, "-byte data section");
    expected_offset = align_up(e.offset + e.t.nbytes, h.alignment);
    entries.push_back(std::move(e));
  }
  if (r.remaining() != 0)
    r.fail_here(cat(r.remaining(), " bytes after the last of the ", h.n_tensors, " tensor entries"));
  const uint64_t end = entries.empty() ? 0 : entries.back().offset + entries.back().t.nbytes;
  if (end != h.data_size)
    fail(path, "data section is ", h.data_size, " bytes, but its tensors end at ", end);
  return entries;
}

void check_links(const std::string& path, const std::vector<Entry>& entries, const TensorSet& ts) {
  for (const Entry& e : entries) {
    const std::string who = cat("tensor '", e.t.name, "'");
    if (e.role != kWeight && e.role != kResidualCodebook && e.role != kResidualIndex &&
        e.role != kGroupParams)
      fail(path, who, ": unknown role ", e.role);
    if (e.role == kWeight && !e.base.empty())
      fail(path, who, " has role ", role_name(e.role), " but links to base '", e.base, "'");
    if (e.role != kWeight) {
      if (e.base.empty()) fail(path, who, " has role ", role_name(e.role), " but names no base tensor");
      if (!ts.find(e.base))
        fail(path, who, " links to base '", e.base, "', which is not in the file");
      const Entry& b = entries[size_t(ts.find(e.base) - ts.tensors.data())];
      if (b.role != kWeight)
        fail(path, who, " links to '", e.base, "', which is not a weight (role ", role_name(b.role), ")");
    }
    const Link implied = link_of(e.t.name);
    if (implied.role != e.role || implied.base != e.base)
      fail(path, who, ": stored role ", role_name(e.role), " and base '", e.base,
           "' disagree with its name, which implies role ", role_name(implied.role), " and base '",
           implied.base, "'");
  }
}

}  // namespace

TensorSet read_bonsai(const std::string& path, const BonsaiReadOptions& opts) {
  auto map = MappedFile::open(path);
  const uint8_t* p = map->data();
  const uint64_t size = map->size();

  // 1. magic and version, before trusting anything else (§3.2).
  if (size < sizeof kMagic || std::memcmp(p, kMagic, sizeof kMagic) != 0) {
    if (size < sizeof kMagic && size > 0 && std::memcmp(p, kMagic, size_t(size)) == 0)
      fail(path, "truncated: ", size, " bytes, a .bonsai header is ", kHeaderBytes);
    fail(path, "not a .bonsai file (bad magic)");
  }
  if (size < kHeaderBytes) fail(path, "truncated: ", size, " bytes, a .bonsai header is ", kHeaderBytes);
  KvReader hr(path, "header", p, kHeaderBytes, 0);
  const Header h = decode_header(hr);
  if (h.version != kVersion)
    fail(path, "unsupported version ", h.version, " (this reader reads .bonsai version ", kVersion, ")");

  // 2-3. the header region must be in the file, then its checksum must match; only then is any
  // other header field believed.
  if (h.meta_size > size - kHeaderBytes || h.table_size > size - kHeaderBytes - h.meta_size)
    fail(path, "the header region (header, ", h.meta_size, "-byte metadata, ", h.table_size,
         "-byte tensor table) extends past the end of the ", size,
         "-byte file: truncated or corrupt");
  const uint64_t region_end = kHeaderBytes + h.meta_size + h.table_size;
  const uint64_t computed = header_checksum(p, region_end);
  if (computed != h.checksum)
    fail(path, "header checksum mismatch (stored ", hex(h.checksum), ", computed ", hex(computed),
         "): the header, metadata or tensor table is corrupt");

  // 4. the rest of the header. The checksum matched, so a failure here is a writer's bug.
  if (h.flags & kRequiredFlags)
    fail(path, "unsupported required flags ", hex(h.flags & kRequiredFlags));
  if (!valid_alignment(h.alignment))
    fail(path, "alignment ", h.alignment, " is not a power of two from 8 to 65536");
  if (h.reserved != 0) fail(path, "reserved header field is ", h.reserved, ", not 0");
  if (h.meta_offset != kHeaderBytes)
    fail(path, "meta_offset ", h.meta_offset, ", expected ", kHeaderBytes);
  if (h.table_offset != kHeaderBytes + h.meta_size)
    fail(path, "table_offset ", h.table_offset, ", expected ", kHeaderBytes + h.meta_size);
  if (h.data_offset != align_up(region_end, h.alignment))
    fail(path, "data_offset ", h.data_offset, ", expected ", align_up(region_end, h.alignment));
  if (h.data_offset > size || h.data_size != size - h.data_offset)
    fail(path, "file is ", size, " bytes, but its header says ", h.data_offset, " + ", h.data_size,
         " (truncated, or bytes appended)");
  check_padding(path, p, region_end, h.data_offset);

  // 5. metadata and tensor table, each bounded by its own section.
  TensorSet ts;
  ts.path = path;
  ts.format = "bonsai";
  if (h.n_kv > h.meta_size / kMinKvPairBytes)
    fail(path, "n_kv = ", h.n_kv, " pairs cannot fit in the ", h.meta_size, "-byte metadata section");
  KvReader mr(path, "metadata", p + kHeaderBytes, h.meta_size, kHeaderBytes);
  ts.meta = mr.metadata(h.n_kv);
  if (mr.remaining() != 0)
    mr.fail_here(cat(mr.remaining(), " bytes after the last of the ", h.n_kv, " metadata pairs"));
  KvReader tr(path, "tensor table", p + h.table_offset, h.table_size, h.table_offset);
  std::vector<Entry> entries = read_table(tr, h, path);

  // 6. links, reserved keys, padding.
  for (const Entry& e : entries) {
    Tensor t = e.t;
    t.data = p + h.data_offset + e.offset;
    ts.add(std::move(t));
  }
  check_links(path, entries, ts);
  check_reserved_keys(path, ts.meta);
  if (const KvValue* a = ts.meta.find("bonsai.alignment"); a && std::get<uint32_t>(a->scalar) != h.alignment)
    fail(path, "metadata key 'bonsai.alignment' is ", std::get<uint32_t>(a->scalar),
         " but the header's alignment is ", h.alignment);
  for (size_t i = 0; i + 1 < entries.size(); ++i)
    check_padding(path, p, h.data_offset + entries[i].offset + entries[i].t.nbytes,
                  h.data_offset + entries[i + 1].offset);

  // 7. tensor checksums.
  if (opts.verify_checksums)
    for (size_t i = 0; i < entries.size(); ++i) {
      const uint64_t c = data_checksum(ts.tensors[i].data, ts.tensors[i].nbytes);
      if (c != entries[i].checksum)
        fail(path, "checksum mismatch in tensor '", entries[i].t.name, "' (stored ",
             hex(entries[i].checksum), ", computed ", hex(c), ")");
    }
  ts.keep(map);
  return ts;
}

BonsaiWriter::BonsaiWriter(std::string path, const Metadata& meta_in, std::span<const Tensor> table)
    : StreamWriter(std::move(path), table), hash_(std::make_unique<Hash>()), checksums_(table.size(), 0) {
  const std::string& where = this->path();  // `path` was moved into the base
  Metadata meta = meta_in;
  if (!meta.has("bonsai.tool_version")) meta.set_str("bonsai.tool_version", BONSAI_VERSION);
  if (!meta.has("bonsai.created")) meta.set_str("bonsai.created", creation_time(where));
  std::vector<uint8_t> region(kHeaderBytes, 0);
  write_metadata(region, meta, where);  // first: it checks that every value holds its declared type
  check_reserved_keys(where, meta);
  Header h;
  if (const KvValue* a = meta.find("bonsai.alignment")) h.alignment = std::get<uint32_t>(a->scalar);
  h.n_kv = meta.size();
  h.meta_size = region.size() - kHeaderBytes;

  // Validate every entry and its link before anything is written (§5, §5.1).
  std::unordered_map<std::string, size_t> by_name;
  for (size_t i = 0; i < table.size(); ++i) {
    const Tensor& t = table[i];
    if (t.name.empty()) fail(where, "tensor ", i, " has an empty name");
    if (!by_name.emplace(t.name, i).second) fail(where, "duplicate tensor name '", t.name, "'");
    const std::string who = cat("tensor '", t.name, "'");
    const TypeTraits* tt = find_type(uint32_t(t.type));
    if (!tt) fail(where, who, ": unknown type id ", uint32_t(t.type));
    if (t.ne.empty() || t.ne.size() > size_t(kMaxDims))
      fail(where, who, ": ", t.ne.size(), " dimensions, expected 1 to ", kMaxDims);
    for (int64_t d : t.ne)
      if (d < 1) fail(where, who, ": shape ", t.shape_str(), " has a dimension below 1");
    const auto want = tensor_bytes(t.type, t.ne);
    if (!want) fail(where, who, ": ", tt->name, " cannot hold shape ", t.shape_str());
    if (t.nbytes != *want)
      fail(where, who, ": ", t.nbytes, " bytes given, ", tt->name, " ", t.shape_str(), " takes ", *want);
  }
  std::vector<Link> links;
  for (const Tensor& t : table) {
    Link l = link_of(t.name);
    if (l.role != kWeight) {
      auto b = by_name.find(l.base);
      if (b == by_name.end())
        fail(where, "tensor '", t.name, "' links to base '", l.base, "', which is not in the file");
      if (link_of(l.base).role != kWeight)
        fail(where, "tensor '", t.name, "' links to '", l.base, "', which is not a weight");
    }
    links.push_back(std::move(l));
  }

  // The checksums are not known until the data has streamed past: the table is written with
  // zeros in their place and rewritten with them, with the header checksum, in finish(). The
  // temporary is not the output until commit, so no reader ever sees the zeros.
  h.table_offset = kHeaderBytes + h.meta_size;
  uint64_t offset = 0;
  std::vector<uint64_t> offsets;
  for (size_t i = 0; i < table.size(); ++i) {
    const Tensor& t = table[i];
    offset = align_up(offset, h.alignment);
    put_string(region, t.name);
    put_u32(region, uint32_t(t.type));
    put_u32(region, links[i].role);
    put_u32(region, uint32_t(t.ne.size()));
    for (int64_t d : t.ne) put_u64(region, uint64_t(d));
    put_u64(region, offset);
    put_u64(region, t.nbytes);
    checksum_at_.push_back(region.size());
    put_u64(region, 0);
    put_string(region, links[i].base);
    offsets.push_back(offset);
    offset += t.nbytes;
  }
  h.n_tensors = table.size();
  h.table_size = region.size() - h.table_offset;
  h.data_offset = align_up(region.size(), h.alignment);
  h.data_size = offset;
  const std::vector<uint8_t> head = encode_header(h);
  std::memcpy(region.data(), head.data(), kChecksumAt);
  for (uint64_t& o : offsets) o += h.data_offset;  // data_offset is aligned: file = data alignment
  set_layout(std::move(region), std::move(offsets), h.data_offset + h.data_size);
}

BonsaiWriter::~BonsaiWriter() = default;

// The checksum of the tensor streaming past: data_checksum's XXH3-64, fed in pieces.
struct BonsaiWriter::Hash {
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> st{XXH3_createState(), XXH3_freeState};
  Hash() {
    if (!st) throw std::bad_alloc();
    XXH3_64bits_reset(st.get());
  }
};

void BonsaiWriter::on_bytes(size_t, const uint8_t* data, uint64_t n) {
  XXH3_64bits_update(hash_->st.get(), data, size_t(n));
}

void BonsaiWriter::on_tensor_done(size_t i) {
  checksums_[i] = XXH3_64bits_digest(hash_->st.get());
  XXH3_64bits_reset(hash_->st.get());
}

void BonsaiWriter::finish() {
  std::vector<uint8_t>& region = head();
  for (size_t i = 0; i < checksums_.size(); ++i) std::memcpy(region.data() + checksum_at_[i], &checksums_[i], 8);
  const uint64_t checksum = header_checksum(region.data(), region.size());
  std::memcpy(region.data() + kChecksumAt, &checksum, sizeof checksum);
  rewrite_head();
}

void write_bonsai(const std::string& path, const Metadata& meta, std::span<const Tensor> tensors) {
  BonsaiWriter w(path, meta, tensors);
  write_tensors(w, tensors);
}

}  // namespace bonsai
