// Canonical ternary blocks (quantize/canonical.h) and `bonsai inspect --check-blocks`: every
// method's packed output re-encodes to the same bytes; a damaged block is found and named.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "formats/model_file.h"
#include "quantize/canonical.h"
#include "quantize/ternary.h"
#include "support.h"

namespace bonsai::quant {
namespace {

struct Packed {
  std::vector<uint8_t> bytes;
  Tensor t;
};

// A 16 × 512 matrix quantized by `m` and packed as `type`, viewed as a Tensor.
Packed packed(Method m, TypeId type) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  std::vector<float> w(16 * 512);
  for (float& x : w) x = nd(rng);
  MethodOptions o;
  o.four_levels = type == TypeId::PQ2_0;
  Packed p;
  p.bytes = quantize_ternary(MatrixIn{w.data(), 16, 512}, m, o).pack(type);
  p.t.name = "w";
  p.t.type = type;
  p.t.ne = {512, 16};
  p.t.data = p.bytes.data();
  p.t.nbytes = p.bytes.size();
  return p;
}

TEST(Canonical, EveryMethodsBlocksReencodeToTheSameBytes) {
  for (TypeId type : {TypeId::PTQ1_0, TypeId::PQ2_0})
    for (Method m : {Method::rtn, Method::absmean, Method::optimal}) {
      const Packed p = packed(m, type);
      EXPECT_EQ(first_noncanonical_block(p.t), -1) << traits(type).name << " " << method_name(m);
    }
}

TEST(Canonical, ADamagedBlockIsFound) {
  Packed a = packed(Method::optimal, TypeId::PTQ1_0);
  a.bytes[5 * 28 + 27] ^= 0x80;  // the sign of the block's fp16 scale (last): the reference rule stores max|w| >= 0
  EXPECT_EQ(first_noncanonical_block(a.t), 5);
  Packed b = packed(Method::optimal, TypeId::PQ2_0);
  for (int i = 2; i < 34; ++i) b.bytes[9 * 34 + i] = 0x55;  // every code "0" under a nonzero scale
  EXPECT_EQ(first_noncanonical_block(b.t), 9);
}

TEST(Canonical, InspectCheckBlocksPassesAWrittenFileAndNamesADamagedTensor) {
  const auto dir = test::scratch_dir();
  const std::string good = (dir / "good.gguf").string(), bad = (dir / "bad.gguf").string();
  Packed a = packed(Method::optimal, TypeId::PTQ1_0);
  a.t.name = "blk.0.attn_q.weight";
  Metadata meta;
  meta.set_str("general.architecture", "qwen3");
  write_model(good, meta, std::span<const Tensor>(&a.t, 1));
  std::string out;
  EXPECT_EQ(test::run_bonsai("inspect " + good + " --no-tensors --check-blocks", &out), 0) << out;
  EXPECT_NE(out.find("all 1 PTQ1_0/PQ2_0 tensors canonical"), std::string::npos) << out;
  a.bytes[3 * 28 + 27] ^= 0x80;
  write_model(bad, meta, std::span<const Tensor>(&a.t, 1));
  EXPECT_EQ(test::run_bonsai("inspect " + bad + " --no-tensors --check-blocks", &out), 1) << out;
  EXPECT_NE(out.find("tensor 'blk.0.attn_q.weight' block 3 is not canonical"), std::string::npos) << out;
  EXPECT_NE(out.find(bad), std::string::npos) << out;
}

}  // namespace
}  // namespace bonsai::quant
