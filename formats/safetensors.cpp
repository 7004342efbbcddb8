#include "formats/safetensors.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>

#include "formats/error.h"
#include "formats/json_file.h"
#include "formats/mapped_file.h"

namespace bonsai {
namespace {

// The header is JSON describing every tensor; real ones are a few hundred KB, so 100 MB only
// stops a corrupt length from asking for the whole address space.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;
constexpr size_t kMaxDims = 4;  // what ggml (and GGUF) can hold

struct Dtype {
  const char* name;
  TypeId id;
  uint64_t bytes;
};
constexpr Dtype kDtypes[] = {{"F32", TypeId::F32, 4}, {"F16", TypeId::F16, 2}, {"BF16", TypeId::BF16, 2}};

uint64_t read_u64le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// A non-negative JSON integer, or an Error naming the tensor and what it is.
uint64_t header_uint(const std::string& path, const std::string& tensor, const char* what,
                     const nlohmann::json& j) {
  if (!j.is_number_unsigned())
    fail(path, "tensor '", tensor, "': ", what, " must be a non-negative integer, not ", json_kind(j));
  return j.get<uint64_t>();
}

struct Entry {
  Tensor t;
  uint64_t begin = 0, end = 0;
};

Entry parse_entry(const std::string& path, const std::string& name, const nlohmann::json& e,
                  uint64_t data_size) {
  if (!e.is_object()) fail(path, "tensor '", name, "': entry must be an object, not ", json_kind(e));
  const auto dt = e.find("dtype");
  const auto shape = e.find("shape");
  const auto offs = e.find("data_offsets");
  if (dt == e.end() || shape == e.end() || offs == e.end())
    fail(path, "tensor '", name, "': entry needs dtype, shape and data_offsets");
  if (!dt->is_string()) fail(path, "tensor '", name, "': dtype must be a string");
  const std::string dtype = dt->get<std::string>();
  const Dtype* d = nullptr;
  for (const Dtype& k : kDtypes)
    if (dtype == k.name) d = &k;
  if (!d) fail(path, "tensor '", name, "': dtype ", dtype, " is not supported (F32, F16, BF16 are)");

  if (!shape->is_array()) fail(path, "tensor '", name, "': shape must be an array");
  if (shape->size() > kMaxDims)
    fail(path, "tensor '", name, "': ", shape->size(), " dimensions, at most ", kMaxDims, " supported");
  Entry out;
  out.t.name = name;
  out.t.type = d->id;
  uint64_t elems = 1;
  for (const auto& dim : *shape) {
    const uint64_t v = header_uint(path, name, "a shape dimension", dim);
    if (v > uint64_t(INT64_MAX) || __builtin_mul_overflow(elems, v, &elems) || elems > uint64_t(INT64_MAX))
      fail(path, "tensor '", name, "': shape ", shape->dump(), " has too many elements");
    out.t.ne.insert(out.t.ne.begin(), int64_t(v));  // safetensors is row-major: reverse for ggml
  }
  if (out.t.ne.empty()) out.t.ne.push_back(1);  // a scalar
  uint64_t nbytes = 0;
  if (__builtin_mul_overflow(elems, d->bytes, &nbytes))
    fail(path, "tensor '", name, "': shape ", shape->dump(), " has too many bytes");

  if (!offs->is_array() || offs->size() != 2)
    fail(path, "tensor '", name, "': data_offsets must be an array of two integers");
  out.begin = header_uint(path, name, "data_offsets[0]", (*offs)[0]);
  out.end = header_uint(path, name, "data_offsets[1]", (*offs)[1]);
  if (out.begin > out.end)
    fail(path, "tensor '", name, "': data_offsets [", out.begin, ", ", out.end, "] run backwards");
  if (out.end > data_size)
    fail(path, "tensor '", name, "': data_offsets end ", out.end, " is past the data section (", data_size,
         " bytes)");
  if (out.end - out.begin != nbytes)
    fail(path, "tensor '", name, "': data_offsets cover ", out.end - out.begin, " bytes, but ", dtype,
         " shape ", shape->dump(), " needs ", nbytes);
  out.t.nbytes = nbytes;
  return out;
}

// Reads one .safetensors file into `set` (tensors in file order). Names already in the set are an
// error: shards of one model never repeat a tensor.
void read_file(const std::string& path, TensorSet& set) {
  const auto file = MappedFile::open(path);
  const uint64_t size = file->size();
  if (size < 8) fail(path, "file of ", size, " bytes is too small for a safetensors header");
  const uint64_t n = read_u64le(file->data());
  if (n > size - 8) fail(path, "header length ", n, " is past the end of the file (", size, " bytes)");
  if (n > kMaxHeaderBytes)
    fail(path, "header length ", n, " is larger than the ", kMaxHeaderBytes, " allowed");
  const nlohmann::json header = parse_json(path, file->data() + 8, size_t(n));
  if (!header.is_object()) fail(path, "header must be a JSON object, not ", json_kind(header));

  const uint64_t data_size = size - 8 - n;
  const uint8_t* data = file->data() + 8 + n;
  std::vector<Entry> entries;
  for (const auto& [name, e] : header.items()) {
    if (name == "__metadata__") {
      // Free-form string map (e.g. {"format": "pt"}); kept for display, nothing depends on it.
      if (e.is_object())
        for (const auto& [k, v] : e.items())
          if (v.is_string() && !set.meta.has("safetensors." + k))
            set.meta.set_str("safetensors." + k, v.get<std::string>());
      continue;
    }
    if (set.find(name)) fail(path, "tensor '", name, "' is also in another shard");
    entries.push_back(parse_entry(path, name, e, data_size));
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  for (size_t i = 1; i < entries.size(); ++i)
    if (entries[i].begin < entries[i - 1].end)
      fail(path, "tensors '", entries[i - 1].t.name, "' and '", entries[i].t.name, "' overlap");
  for (Entry& e : entries) {
    e.t.data = data + e.begin;
    set.add(std::move(e.t));
  }
  set.keep(file);
}

// A shard name from an index must stay inside the index's folder.
bool plain_file_name(const std::string& s) {
  return !s.empty() && s != "." && s != ".." && s.find('/') == std::string::npos &&
         s.find('\\') == std::string::npos && s.find('\0') == std::string::npos;
}

void read_index(const std::string& path, TensorSet& set) {
  const nlohmann::json index = read_json_file(path);
  if (!index.is_object()) fail(path, "index must be a JSON object, not ", json_kind(index));
  const auto wm = index.find("weight_map");
  if (wm == index.end() || !wm->is_object()) fail(path, "no weight_map object");
  std::map<std::string, std::vector<std::string>> shards;  // sorted: shard 1 of N first
  for (const auto& [tensor, file] : wm->items()) {
    if (!file.is_string()) fail(path, "weight_map entry '", tensor, "' must be a file name");
    const std::string f = file.get<std::string>();
    if (!plain_file_name(f))
      fail(path, "weight_map entry '", tensor, "' names '", f,
           "', which is not a plain file name in this folder");
    shards[f].push_back(tensor);
  }
  if (shards.empty()) fail(path, "weight_map is empty");
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  for (const auto& [file, tensors] : shards) {
    const size_t before = set.tensors.size();
    // The shard's own errors name the shard; say which index sent the reader there.
    try {
      read_file((dir / file).string(), set);
    } catch (const Error& e) {
      fail(path, "shard ", file, " of weight_map: ", e.what());
    }
    for (size_t i = before; i < set.tensors.size(); ++i) {
      const std::string& t = set.tensors[i].name;
      const auto listed = wm->find(t);
      if (listed == wm->end()) fail(path, file, " holds '", t, "', which weight_map does not list");
      if (listed->get<std::string>() != file)
        fail(path, "weight_map places '", t, "' in ", listed->get<std::string>(), ", but ", file,
             " holds it");
    }
  }
  // A listed tensor that its shard does not hold.
  for (const auto& [file, tensors] : shards)
    for (const std::string& t : tensors)
      if (!set.find(t)) fail(path, "weight_map places '", t, "' in ", file, ", which does not hold it");
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

TensorSet read_safetensors(const std::string& path) {
  TensorSet set;
  set.path = path;
  set.format = "safetensors";
  if (ends_with(path, ".json"))
    read_index(path, set);
  else
    read_file(path, set);
  return set;
}

}  // namespace bonsai
