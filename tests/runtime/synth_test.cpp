// bonsai synth's residual option: the block weights of a PQ2_0 model get random residual
// codebooks that the runtime loads (formats' view validates them) and bench counts; wrong
// options are refused before anything is written.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <filesystem>
#include <optional>
#include <set>

#include "formats/error.h"
#include "runtime/bench.h"
#include "runtime/load.h"
#include "runtime/synth.h"
#include "support.h"

using namespace bonsai;

namespace {

SynthOptions tiny_pq2(int64_t rc_rows) {
  SynthOptions o;
  o.size = "tiny";
  o.type = TypeId::PQ2_0;
  o.residual = true;
  o.rc_rows = rc_rows;
  return o;
}

uint64_t file_xxh3(const std::string& p) {
  const auto b = test::read_bytes(p);
  return XXH3_64bits(b.data(), b.size());
}

std::string synth_error(const SynthOptions& o, const std::string& out) {
  try {
    synth_model(o, out);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(SynthResidual, EveryBlockWeightCarriesItsCodebooksAndBenchCountsThem) {
  const std::string out = (test::scratch_dir() / "synth-rc.gguf").string();
  synth_model(tiny_pq2(64), out);
  const auto m = load_model(out);
  EXPECT_EQ(m->file.meta.get_str("bonsai.residual.scheme"), std::optional<std::string>("kmeans"));
  ASSERT_EQ(m->residuals.size(), size_t(m->cfg.n_layer) * 7);
  // The bytes a token reads, from the shapes alone: base weights, head, one embedding row, and
  // per block weight rows/64 codebooks of 16 fp16 centroids of 8 plus 4-bit indices per 8 inputs.
  uint64_t want = m->output->nbytes + m->token_embd->nbytes / uint64_t(m->cfg.n_vocab);
  std::set<uint32_t> seen;
  for (const LayerWeights& l : m->layers)
    for (const Tensor* t : {l.wq, l.wk, l.wv, l.wo, l.gate, l.up, l.down}) {
      ASSERT_EQ(t->type, TypeId::PQ2_0);
      const int64_t cols = t->ne[0], rows = t->ne[1];
      want += t->nbytes + uint64_t(rows / 64) * 16 * 8 * 2 + uint64_t(rows) * uint64_t(cols / 8 * 4 / 8);
      const ResidualView& v = m->residuals.at(t);
      EXPECT_EQ(v.scheme, ResidualScheme::kmeans);
      EXPECT_EQ(v.dim, 8);
      EXPECT_EQ(v.size, 16);
      EXPECT_EQ(v.books, rows / 64);
      for (int64_t p = 0; p < cols / 8; ++p) seen.insert(v.index(rows - 1, p));
    }
  EXPECT_EQ(weight_bytes_per_token(*m), want);
  EXPECT_EQ(seen.size(), 16u) << "random indices should reach every centroid";
}

TEST(SynthResidual, RefusesOtherTypesAndShapesItCannotStore) {
  const auto out = test::scratch_dir() / "synth-bad.gguf";
  SynthOptions o = tiny_pq2(0);
  o.type = TypeId::PTQ1_0;
  EXPECT_NE(synth_error(o, out.string()).find("--residual needs --type pq2_0"), std::string::npos);
  o = tiny_pq2(7);
  EXPECT_NE(synth_error(o, out.string()).find("--rc-rows 7 does not divide"), std::string::npos);
  o = tiny_pq2(0);
  o.rc_dim = 3;
  EXPECT_NE(synth_error(o, out.string()).find("--rc-dim 3 does not divide the group of 128"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(out));
}

// The bytes synth wrote when it held the whole model in memory and wrote it with write_model
// (checksums taken at c7d28ac): streaming it tensor by tensor changes none of them.
TEST(SynthOutput, TinyFilesAreThoseOfTheInMemoryWriter) {
  const auto dir = test::scratch_dir();
  SynthOptions o;
  o.size = "tiny";
  synth_model(o, (dir / "ptq1.gguf").string());
  EXPECT_EQ(file_xxh3((dir / "ptq1.gguf").string()), 0xc49312f41267abf3ull);
  synth_model(tiny_pq2(64), (dir / "pq2-rc.gguf").string());
  EXPECT_EQ(file_xxh3((dir / "pq2-rc.gguf").string()), 0xc97ffc6ae35c61ceull);
  o.type = TypeId::BF16;
  o.embd_type = TypeId::BF16;
  o.seed = 3;
  synth_model(o, (dir / "bf16.gguf").string());
  EXPECT_EQ(file_xxh3((dir / "bf16.gguf").string()), 0xa6a6fd76c08e732cull);
}
