#include "formats/model_file.h"

#include <cstring>
#include <filesystem>
#include <fstream>

#include "formats/bonsai_file.h"
#include "formats/error.h"
#include "formats/gguf.h"
#include "formats/hf_model.h"
#include "formats/llama2c.h"
#include "formats/safetensors.h"

namespace bonsai {

namespace fs = std::filesystem;

std::string detect_format(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    if (fs::exists(fs::path(path) / "config.json")) return "hf";
    fail(path, "a folder without config.json is not a Hugging Face model folder");
  }
  if (!fs::exists(path, ec)) fail(path, "no such file or folder");
  if (path.ends_with(".safetensors.index.json")) return "safetensors";
  std::ifstream f(path, std::ios::binary);
  char head[16] = {};
  f.read(head, sizeof head);
  const auto got = f.gcount();
  if (got >= 4 && std::memcmp(head, "GGUF", 4) == 0) return "gguf";
  if (got >= 6 && std::memcmp(head, "BONSAI", 6) == 0) return "bonsai";
  if (got >= 9 && head[8] == '{') return "safetensors";  // u64 header length, then JSON
  if (path.ends_with(".bin") && got >= 16) return "llama2c";
  fail(path, "unrecognised model file (expected GGUF, .bonsai, safetensors, a Hugging Face folder "
             "or a llama2.c .bin)");
}

TensorSet open_model(const std::string& path) {
  const std::string f = detect_format(path);
  if (f == "gguf") return read_gguf(path);
  if (f == "bonsai") return read_bonsai(path);
  if (f == "hf") return open_hf_model(path);
  // A safetensors file is read as stored (its own names and types); its folder, as the model.
  if (f == "safetensors") return read_safetensors(path);
  return read_llama2c(path);
}

}  // namespace bonsai

namespace bonsai {

std::unique_ptr<StreamWriter> open_model_writer(const std::string& path, const Metadata& meta,
                                                std::span<const Tensor> table) {
  if (path.ends_with(".gguf")) return std::make_unique<GgufWriter>(path, meta, table);
  if (path.ends_with(".bonsai")) return std::make_unique<BonsaiWriter>(path, meta, table);
  fail(path, "output must end in .gguf or .bonsai");
}

void write_model(const std::string& path, const Metadata& meta, std::span<const Tensor> tensors) {
  write_tensors(*open_model_writer(path, meta, tensors), tensors);
}

Tensor convert_tensor(const Tensor& t, TypeId type, TensorSet& owner) {
  const TypeTraits& src = traits(t.type);
  const TypeTraits& dst = traits(type);
  Tensor out = t;
  out.type = type;
  const auto bytes = tensor_bytes(type, t.ne);
  if (!bytes)
    fail(owner.path, "tensor '", t.name, "' ", t.shape_str(), " cannot be stored as ", dst.name, " (rows must be a multiple of ",
         dst.block_elems, ")");
  out.nbytes = *bytes;
  uint8_t* data = owner.alloc(out.nbytes);
  out.data = data;
  const int64_t cols = t.ne[0], rows = t.rows();
  const uint64_t src_row = *row_bytes(t.type, uint64_t(cols)), dst_row = *row_bytes(type, uint64_t(cols));
#pragma omp parallel
  {
    std::vector<float> row(static_cast<size_t>(cols));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      src.to_float(t.data + uint64_t(r) * src_row, row.data(), cols);
      dst.from_float(row.data(), data + uint64_t(r) * dst_row, cols);
    }
  }
  return out;
}

void convert_model(const TensorSet& src, TypeId type, const std::string& out) {
  TensorSet dst;
  dst.path = out;
  dst.meta = src.meta;
  dst.meta.set_u32("general.file_type", llama_file_type(type));
  if (traits(type).quantized) dst.meta.set_u32("general.quantization_version", 2);
  for (const Tensor& t : src.tensors) {
    const TypeId want = t.ne.size() >= 2 ? type : TypeId::F32;
    dst.add(t.type == want ? t : convert_tensor(t, want, dst));
  }
  write_model(out, dst.meta, dst.tensors);
}

uint32_t llama_file_type(TypeId type) {
  switch (type) {
    case TypeId::F32: return 0;
    case TypeId::F16: return 1;
    case TypeId::Q4_0: return 2;
    case TypeId::Q8_0: return 7;
    case TypeId::BF16: return 32;
    case TypeId::TQ1_0: return 36;
    case TypeId::TQ2_0: return 37;
    case TypeId::Q1_0: return 40;
    case TypeId::Q2_0: return 41;
    case TypeId::PQ2_0: return 141;
    case TypeId::PTQ1_0: return 143;
    case TypeId::I8: break;  // never a model's weight type
  }
  return 0;
}

}  // namespace bonsai
