// Activation statistics: accumulation against a direct computation, the GGUF round trip, and a
// clear error naming the file for every malformed statistics file.
#include <gtest/gtest.h>

#include <random>

#include "calibrate/runner.h"
#include "calibrate/stats.h"
#include "formats/error.h"
#include "formats/gguf.h"
#include "support.h"

using namespace bonsai;
using namespace bonsai::calib;

namespace {

std::vector<float> random_rows(int64_t n, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(size_t(n * cols));
  for (int64_t i = 0; i < n * cols; ++i) x[size_t(i)] = d(rng) * float(1 + i % cols);  // columns of different scale
  return x;
}

using test::error_of;

InputStats fresh(int64_t cols, bool gram) {
  InputStats s;
  s.cols = cols;
  if (gram) s.gram.assign(size_t(cols * cols), 0.0);
  return s;
}

}  // namespace

TEST(InputStats, MatchesDirectSumsAcrossCallsAndChunks) {
  const int64_t cols = 12, n1 = kGramRows + 904, n2 = 37;  // n1 crosses a Gram chunk
  const auto a = random_rows(n1, cols, 1), b = random_rows(n2, cols, 2);
  InputStats s = fresh(cols, true);
  s.add(a.data(), n1);
  s.add(b.data(), n2);
  EXPECT_EQ(s.rows_seen, n1 + n2);
  std::vector<double> sq(size_t(cols), 0.0), g(size_t(cols * cols), 0.0);
  for (const auto* x : {&a, &b})
    for (size_t r = 0; r < x->size() / size_t(cols); ++r)
      for (int64_t i = 0; i < cols; ++i) {
        const double xi = (*x)[r * size_t(cols) + size_t(i)];
        sq[size_t(i)] += xi * xi;
        for (int64_t j = 0; j < cols; ++j) g[size_t(i * cols + j)] += xi * (*x)[r * size_t(cols) + size_t(j)];
      }
  for (int64_t i = 0; i < cols; ++i) {
    EXPECT_NEAR(s.sum_sq[size_t(i)], sq[size_t(i)], 1e-9 * sq[size_t(i)]) << i;
    for (int64_t j = 0; j < cols; ++j) {
      const double want = g[size_t(i * cols + j)], scale = std::sqrt(sq[size_t(i)] * sq[size_t(j)]);
      EXPECT_NEAR(s.gram[size_t(i * cols + j)], want, 1e-5 * scale) << i << "," << j;  // float products per chunk
    }
  }
  const auto m = s.mean_sq();
  const auto mg = s.mean_gram();
  EXPECT_NEAR(m[3], sq[3] / double(n1 + n2), 1e-6 * m[3]);
  EXPECT_NEAR(mg[size_t(3 * cols + 3)], g[size_t(3 * cols + 3)] / double(n1 + n2), 1e-5 * m[3]);
}

TEST(InputStats, GramOnlyWhenSizedAndErrors) {
  const auto x = random_rows(10, 4, 3);
  InputStats s = fresh(4, false);
  s.add(x.data(), 10);
  EXPECT_TRUE(s.gram.empty());
  EXPECT_EQ(s.sum_sq.size(), 4u);
  InputStats none;
  EXPECT_NE(error_of([&] { none.add(x.data(), 10); }).find("cols"), std::string::npos);
  InputStats bad = fresh(4, false);
  bad.gram.assign(5, 0.0);
  EXPECT_NE(error_of([&] { bad.add(x.data(), 10); }).find("gram"), std::string::npos);
}

TEST(InputStats, InputKeysShareTheFirstWeight) {
  EXPECT_EQ(input_key("blk.3.attn_k.weight"), "blk.3.attn_q.weight");
  EXPECT_EQ(input_key("blk.3.attn_v.weight"), "blk.3.attn_q.weight");
  EXPECT_EQ(input_key("blk.3.attn_q.weight"), "blk.3.attn_q.weight");
  EXPECT_EQ(input_key("blk.10.ffn_up.weight"), "blk.10.ffn_gate.weight");
  EXPECT_EQ(input_key("blk.10.ffn_down.weight"), "blk.10.ffn_down.weight");
  EXPECT_EQ(input_key("blk.0.attn_output.weight"), "blk.0.attn_output.weight");
  EXPECT_EQ(input_key("output.weight"), "output.weight");
}

TEST(StatsFile, RoundTripIsExactAfterRounding) {
  Stats s;
  s.manifest_json = R"({"windows":8,"window_len":256})";
  InputStats a = fresh(8, true), b = fresh(16, false);
  const auto xa = random_rows(100, 8, 4), xb = random_rows(50, 16, 5);
  a.add(xa.data(), 100);
  b.add(xb.data(), 50);
  a.round_to_f32();
  b.round_to_f32();
  s.by_weight["blk.0.attn_q.weight"] = a;
  s.by_weight["blk.0.ffn_down.weight"] = b;
  const auto path = (test::scratch_dir() / "stats.gguf").string();
  save_stats(path, s);
  const Stats l = load_stats(path);
  EXPECT_EQ(l.manifest_json, s.manifest_json);
  ASSERT_EQ(l.by_weight.size(), 2u);
  for (const auto& [name, want] : s.by_weight) {
    const InputStats& got = l.by_weight.at(name);
    EXPECT_EQ(got.cols, want.cols) << name;
    EXPECT_EQ(got.rows_seen, want.rows_seen) << name;
    EXPECT_EQ(got.sum_sq, want.sum_sq) << name;
    EXPECT_EQ(got.gram, want.gram) << name;
  }
  // A file that is a valid GGUF written twice gives the same bytes (deterministic order).
  const auto path2 = (test::scratch_dir() / "stats2.gguf").string();
  save_stats(path2, l);
  EXPECT_EQ(test::read_bytes(path), test::read_bytes(path2));
}

TEST(StatsFile, MalformedFilesNameTheFileAndTheProblem) {
  // A valid statistics file, then edited copies.
  Stats s;
  InputStats a = fresh(4, true);
  const auto x = random_rows(20, 4, 6);
  a.add(x.data(), 20);
  s.by_weight["w"] = a;
  const auto dir = test::scratch_dir();
  const auto good = (dir / "good.gguf").string();
  save_stats(good, s);
  auto edited = [&](const std::string& name, const std::function<void(TensorSet&)>& edit) {
    TensorSet ts = read_gguf(good);
    edit(ts);
    const auto p = (dir / name).string();
    write_gguf(p, ts.meta, ts.tensors);
    return p;
  };
  struct Case {
    std::string path, expect;
  };
  std::vector<float> neg(4, -1.0f);
  const std::vector<Case> cases = {
      {(dir / "missing.gguf").string(), "missing.gguf"},
      {edited("noversion.gguf", [](TensorSet& ts) { ts.meta.erase("bonsai.calib.version"); }), "not a bonsai statistics file"},
      {edited("version.gguf", [](TensorSet& ts) { ts.meta.set_u32("bonsai.calib.version", 9); }), "version is 9"},
      {edited("rows.gguf", [](TensorSet& ts) { ts.meta.set("bonsai.calib.rows", KvValue::of_array(KvType::U64, {})); }),
       "1 weights but bonsai.calib.rows has 0"},
      {edited("zero.gguf",
              [](TensorSet& ts) { ts.meta.set("bonsai.calib.rows", KvValue::of_array(KvType::U64, {uint64_t(0)})); }),
       "0 rows"},
      {edited("nosq.gguf", [](TensorSet& ts) { std::erase_if(ts.tensors, [](const Tensor& t) { return t.name == "w.in_sum_sq"; }); }),
       "'w.in_sum_sq' is missing"},
      {edited("gramshape.gguf",
              [](TensorSet& ts) {
                for (Tensor& t : ts.tensors)
                  if (t.name == "w.in_gram") t.ne = {2, 8};
              }),
       "'w.in_gram' must be F32 [4, 4]"},
      {edited("extra.gguf",
              [](TensorSet& ts) {
                Tensor t = ts.tensors[0];
                t.name = "other.in_sum_sq";
                ts.add(t);
              }),
       "'other.in_sum_sq' belongs to no weight"},
      {edited("negative.gguf",
              [&](TensorSet& ts) {
                for (Tensor& t : ts.tensors)
                  if (t.name == "w.in_sum_sq") t.data = reinterpret_cast<const uint8_t*>(neg.data());
              }),
       "holds -1"},
      {edited("type.gguf", [](TensorSet& ts) { ts.meta.set_u32("bonsai.calib.weights", 3); }), "bonsai.calib.weights"},
  };
  for (const auto& c : cases) {
    const std::string e = error_of([&] { load_stats(c.path); });
    EXPECT_NE(e.find(c.path), std::string::npos) << e;
    EXPECT_NE(e.find(c.expect), std::string::npos) << c.path << ": " << e;
  }
}

// GGUF allows general.alignment 1: a statistics file written elsewhere may hold its tensors at odd
// offsets. They load with the same values (the sanitizer build would report a misaligned float
// read).
TEST(StatsFile, UnalignedTensorDataLoads) {
  Stats s;
  InputStats a = fresh(3, true);
  const auto x = random_rows(5, 3, 7);
  a.add(x.data(), 5);
  a.round_to_f32();
  s.by_weight["w"] = a;
  const auto dir = test::scratch_dir();
  const auto good = (dir / "good.gguf").string();
  save_stats(good, s);
  int misaligned = 0;
  for (int pad = 0; pad < 4; ++pad) {
    TensorSet ts = read_gguf(good);
    ts.meta.set_u32("general.alignment", 1);
    ts.meta.set_str("bonsai.calib.manifest", std::string(size_t(pad), ' '));  // shifts the data by pad bytes
    const auto p = (dir / ("a" + std::to_string(pad) + ".gguf")).string();
    write_gguf(p, ts.meta, ts.tensors);
    misaligned += reinterpret_cast<uintptr_t>(read_gguf(p).get("w.in_sum_sq").data) % 4 != 0;
    const Stats back = load_stats(p);
    EXPECT_EQ(back.by_weight.at("w").sum_sq, a.sum_sq);
    EXPECT_EQ(back.by_weight.at("w").gram, a.gram);
  }
  EXPECT_EQ(misaligned, 3);
}

// Damaged statistics files (test::damage_file over the fuzz seed, as every reader of untrusted
// input): every flip in the header and every cut is an Error naming the file, or still a file
// of statistics; never a crash.
TEST(StatsMalformedInput, FlipsAndCutsAreErrorsNamingTheFile) {
  const auto good = test::fuzz_seed("stats", "seed-stats.gguf");
  const auto d = test::damage_file(test::scratch_dir() / "stats.gguf", good, good.size(), good.size(),
                                   [](const std::string& p) { (void)load_stats(p); });
  EXPECT_GT(d.flips_refused, d.flips / 4);
}
