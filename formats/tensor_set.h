// What every model reader returns: named tensors (type, ggml shape, bytes — normally pointing
// into a memory map) plus GGUF-style metadata. Readers of other layouts (safetensors + config.json,
// llama2.c) translate to llama.cpp's tensor names and keys (spec §7), so the runtime and the
// writers see one shape of model whatever the file was.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "formats/metadata.h"
#include "formats/types.h"

namespace bonsai {

struct Tensor {
  std::string name;
  TypeId type = TypeId::F32;
  std::vector<int64_t> ne;  // ggml order: ne[0] is the contiguous (row / input) dimension
  const uint8_t* data = nullptr;
  uint64_t nbytes = 0;
  // Unique in the process, given by TensorSet::add (0: a tensor made outside any set). Caches of
  // something derived from a tensor (a backend's device copy, a regrouped layout) key on it with
  // the address: once a set is gone its addresses are reused by the next file mapped.
  uint64_t uid = 0;

  int64_t nelements() const;
  int64_t rows() const { return ne.empty() ? 0 : nelements() / ne[0]; }
  std::string shape_str() const;  // "[256, 768]"
};

class TensorSet {
 public:
  std::string path;    // what was opened (file or folder)
  std::string format;  // "gguf", "bonsai", "safetensors", "llama2c"
  Metadata meta;
  std::vector<Tensor> tensors;

  const Tensor* find(const std::string& name) const;
  // Throws Error naming this->path when the tensor is missing.
  const Tensor& get(const std::string& name) const;
  void add(Tensor t);
  // Keeps a memory map or an owned buffer alive as long as the set (tensor data points into it).
  void keep(std::shared_ptr<const void> owner) { owners_.push_back(std::move(owner)); }
  // Owned storage for a tensor made in memory (converted, permuted); returns its bytes.
  uint8_t* alloc(uint64_t nbytes);
  // The architecture prefix (general.architecture), or an Error when absent.
  std::string arch() const;

 private:
  std::unordered_map<std::string, size_t> index_;
  std::vector<std::shared_ptr<const void>> owners_;
};

}  // namespace bonsai
