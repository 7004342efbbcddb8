#include "formats/tensor_set.h"

#include <atomic>
#include <sstream>

#include "formats/error.h"

namespace bonsai {

int64_t Tensor::nelements() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}

std::string Tensor::shape_str() const {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < ne.size(); ++i) os << (i ? ", " : "") << ne[i];
  os << ']';
  return os.str();
}

const Tensor* TensorSet::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors[it->second];
}

const Tensor& TensorSet::get(const std::string& name) const {
  if (const Tensor* t = find(name)) return *t;
  fail(path, "tensor '", name, "' is missing");
}

void TensorSet::add(Tensor t) {
  if (index_.count(t.name)) fail(path, "duplicate tensor name '", t.name, "'");
  static std::atomic<uint64_t> next_uid{0};
  t.uid = ++next_uid;
  index_.emplace(t.name, tensors.size());
  tensors.push_back(std::move(t));
}

uint8_t* TensorSet::alloc(uint64_t nbytes) {
  auto buf = std::shared_ptr<uint8_t[]>(new uint8_t[nbytes > 0 ? nbytes : 1]());
  uint8_t* p = buf.get();
  owners_.push_back(std::shared_ptr<const void>(buf, p));
  return p;
}

std::string TensorSet::arch() const {
  auto a = meta.get_str("general.architecture");
  if (!a) fail(path, "no general.architecture in the metadata");
  return *a;
}

}  // namespace bonsai
