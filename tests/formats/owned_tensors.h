// Tensors that own their bytes, for tests and fuzz seeds that build files with the project's
// writers (which take tensors pointing at bytes kept elsewhere).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "formats/tensor_set.h"
#include "formats/types.h"

namespace bonsai::test {

struct OwnedTensors {
  std::vector<Tensor> tensors;
  std::vector<std::unique_ptr<std::vector<uint8_t>>> owned;

  // Adds a tensor of this type and shape; returns its bytes (zeros) for the caller to fill.
  std::vector<uint8_t>& add(const std::string& name, TypeId type, std::vector<int64_t> ne) {
    Tensor t;
    t.name = name;
    t.type = type;
    t.ne = std::move(ne);
    t.nbytes = *tensor_bytes(type, t.ne);
    owned.push_back(std::make_unique<std::vector<uint8_t>>(t.nbytes));
    t.data = owned.back()->data();
    tensors.push_back(std::move(t));
    return *owned.back();
  }
};

}  // namespace bonsai::test
