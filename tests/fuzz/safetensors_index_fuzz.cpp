// The sharded-model index (model.safetensors.index.json): the input is the index; two valid
// shards lie beside it, so the weight_map checks (names, shard files, tensors in the wrong shard,
// paths leaving the folder) are reached.
#include "formats/safetensors.h"
#include "formats/safetensors_fixture.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool shards_written = [] {
    for (const auto& [name, bytes] : bonsai::test::two_shards()) bonsai::fuzz::input_file(bytes.data(), bytes.size(), name);
    return true;
  }();
  (void)shards_written;
  const std::string path = bonsai::fuzz::input_file(data, size, "model.safetensors.index.json");
  // Errors may name the index or the shard it points to: both are in the scratch folder.
  bonsai::fuzz::expect_only_errors([&] { bonsai::fuzz::touch_tensors(bonsai::read_safetensors(path)); },
                                   bonsai::fuzz::scratch());
  return 0;
}
