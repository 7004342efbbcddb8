// Quantization plans (quantize/plan.cpp): YAML text parsed from memory, then resolved against a
// small llama-shaped tensor list, so the plan's regexes are compiled and searched too.
#include <string>
#include <vector>

#include "formats/tensor_set.h"
#include "fuzz/fuzz_input.h"
#include "quantize/plan.h"

namespace {

std::vector<bonsai::Tensor> model_tensors() {
  std::vector<bonsai::Tensor> ts;
  auto add = [&](std::string name, std::vector<int64_t> ne) {
    bonsai::Tensor t;
    t.name = std::move(name);
    t.ne = std::move(ne);
    t.nbytes = uint64_t(t.nelements()) * 4;
    ts.push_back(std::move(t));
  };
  add("token_embd.weight", {256, 512});
  for (int b = 0; b < 2; ++b) {
    const std::string p = "blk." + std::to_string(b) + ".";
    for (const char* m : {"attn_q", "attn_k", "attn_v", "attn_output"}) add(p + m + ".weight", {256, 256});
    for (const char* m : {"ffn_gate", "ffn_up"}) add(p + m + ".weight", {256, 512});
    add(p + "ffn_down.weight", {512, 256});
    add(p + "attn_norm.weight", {256});
  }
  add("output_norm.weight", {256});
  add("output.weight", {256, 512});
  return ts;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<bonsai::Tensor> tensors = model_tensors();
  const std::string yaml(reinterpret_cast<const char*>(data), size);
  bonsai::fuzz::expect_only_errors(
      [&] {
        const auto plan = bonsai::quant::parse_plan(yaml, "fuzz.yaml");
        (void)bonsai::quant::resolve_plan(plan, tensors, 2, std::nullopt, bonsai::quant::Method::absmean);
      },
      "fuzz.yaml");
  return 0;
}
