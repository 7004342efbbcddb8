// Residual codebook tensors (formats/residual.h): index packing, decoding, and the named load
// errors for tensors that do not fit their base.
#include "formats/residual.h"

#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <random>

#include "formats/error.h"
#include "formats/fp16.h"

using namespace bonsai;

namespace {

// A base [cols, rows] and a kmeans residual of sub-vector dim, size centroids, books codebooks,
// random centroids and indices (below size).
struct Fixture {
  TensorSet ts;
  Tensor base;
  std::vector<uint16_t> book;
  std::vector<uint8_t> index;
  std::vector<uint16_t> params;

  Fixture(int64_t cols, int64_t rows, int64_t dim, int64_t size, int64_t books, bool pattern = false) {
    ts.path = "test.gguf";
    base.name = "blk.0.attn_q.weight";
    base.type = TypeId::F32;
    base.ne = {cols, rows};
    std::mt19937 rng(5);
    std::normal_distribution<float> nd(0.0f, 0.01f);
    book.resize(size_t(dim * size * books));
    for (auto& h : book) h = f32_to_fp16(nd(rng));
    const int bits = index_bits(size);
    const int64_t per_row = cols / dim;
    const uint64_t rb = index_row_bytes(per_row, bits);
    index.assign(size_t(rb * uint64_t(rows)), 0);
    std::vector<uint32_t> idx(static_cast<size_t>(per_row));
    for (int64_t r = 0; r < rows; ++r) {
      for (auto& i : idx) i = uint32_t(rng() % uint64_t(size));
      pack_indices(idx.data(), per_row, bits, index.data() + uint64_t(r) * rb);
    }
    add(base.name, TypeId::F32, base.ne, nullptr, 0);
    add(base.name + kRcCodebookSuffix, TypeId::F16, {dim, size, books}, book.data(), book.size() * 2);
    add(base.name + kRcIndexSuffix, TypeId::I8, {int64_t(rb), rows}, index.data(), index.size());
    if (pattern) {
      params.resize(size_t(2 * per_row * rows));
      for (auto& h : params) h = f32_to_fp16(nd(rng));
      add(base.name + kRcParamsSuffix, TypeId::F16, {2, per_row, rows}, params.data(), params.size() * 2);
    }
  }
  void add(const std::string& name, TypeId type, std::vector<int64_t> ne, const void* data, uint64_t nbytes) {
    Tensor t;
    t.name = name;
    t.type = type;
    t.ne = std::move(ne);
    t.data = static_cast<const uint8_t*>(data);
    t.nbytes = nbytes;
    ts.add(t);
  }
  Tensor& tensor(const std::string& suffix) {
    for (auto& t : ts.tensors)
      if (t.name == base.name + suffix) return t;
    throw std::runtime_error("no " + suffix);
  }
};

void expect_error(Fixture& f, const std::string& what) {
  ResidualView v;
  try {
    find_residual(f.ts, f.base, &v);
    ADD_FAILURE() << "no error, expected: " << what;
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
    EXPECT_NE(msg.find("test.gguf"), std::string::npos) << msg;
  }
}

}  // namespace

TEST(ResidualFormat, IndicesPackLsbFirstAtAnyWidth) {
  std::mt19937 rng(1);
  for (int bits = 1; bits <= 16; ++bits) {
    const int64_t n = 37;
    std::vector<uint32_t> idx(n);
    for (auto& i : idx) i = uint32_t(rng() & ((1u << bits) - 1));
    std::vector<uint8_t> row(index_row_bytes(n, bits));
    pack_indices(idx.data(), n, bits, row.data());
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(index_at(row.data(), i, bits), idx[size_t(i)]) << bits;
  }
  const uint32_t two[] = {1, 2};  // 2-bit: 01 then 10 -> 0b1001
  uint8_t b = 0;
  pack_indices(two, 2, 2, &b);
  EXPECT_EQ(b, 0x09);
  EXPECT_EQ(index_bits(2), 1);
  EXPECT_EQ(index_bits(16), 4);
  EXPECT_EQ(index_bits(17), 5);
  EXPECT_EQ(index_bits(256), 8);
}

TEST(ResidualFormat, ViewDecodesCodebookEntries) {
  Fixture f(256, 6, 8, 16, 3);
  ResidualView v;
  ASSERT_TRUE(find_residual(f.ts, f.base, &v));
  EXPECT_EQ(v.scheme, ResidualScheme::kmeans);
  EXPECT_EQ(v.rows_per_book(), 2);
  const auto r = v.dequantize();
  for (int64_t row = 0; row < 6; ++row)
    for (int64_t p = 0; p < 32; ++p)
      for (int64_t k = 0; k < 8; ++k)
        ASSERT_EQ(r[size_t(row * 256 + p * 8 + k)], fp16_to_f32(f.book[size_t(((row / 2) * 16 + v.index(row, p)) * 8 + k)]));
  EXPECT_EQ(v.stored_bytes(), f.book.size() * 2 + f.index.size());

  Fixture pf(256, 3, 128, 4, 1, true);
  ASSERT_TRUE(find_residual(pf.ts, pf.base, &v));
  EXPECT_EQ(v.scheme, ResidualScheme::pattern);
  const auto rp = v.dequantize();
  const float mu = fp16_to_f32(pf.params[2 * 3]), sigma = fp16_to_f32(pf.params[2 * 3 + 1]);  // row 1, group 1
  EXPECT_EQ(rp[size_t(256 + 128 + 5)], mu + sigma * fp16_to_f32(pf.book[size_t(v.index(1, 1) * 128 + 5)]));
}

TEST(ResidualFormat, NoResidualIsNotAnError) {
  Fixture f(256, 4, 8, 16, 1);
  Tensor other;
  other.name = "blk.0.attn_k.weight";
  other.ne = {256, 4};
  ResidualView v;
  EXPECT_FALSE(find_residual(f.ts, other, &v));
}

TEST(ResidualFormat, ShapeMismatchIsANamedError) {
  Fixture f(256, 4, 8, 16, 1);
  f.tensor(kRcIndexSuffix).ne = {16, 4};  // 32 indices of 4 bits need 16 bytes: fine ...
  ResidualView v;
  EXPECT_NO_THROW(find_residual(f.ts, f.base, &v));
  f.tensor(kRcIndexSuffix).ne = {16, 3};  // ... for 4 rows, not 3
  expect_error(f, "does not match its base");
  Fixture g(256, 4, 8, 16, 1);
  g.base.ne = {384, 4};  // a wider base than the index covers
  expect_error(g, "does not match its base");
  Fixture h(256, 4, 8, 16, 1, true);  // pattern parameters with a non-pattern codebook
  expect_error(h, "pattern scheme");
  Fixture d(256, 4, 8, 16, 1);
  d.tensor(kRcCodebookSuffix).ne = {6, 16, 1};
  expect_error(d, "does not divide the group of 128");
  Fixture t(256, 4, 8, 16, 1);
  t.tensor(kRcCodebookSuffix).type = TypeId::F32;
  expect_error(t, "expected F16");
}

TEST(ResidualFormat, IndexBeyondTheCodebookIsANamedError) {
  Fixture f(256, 4, 8, 12, 1);  // 12 centroids, 4-bit indices: 12..15 are out of range
  ResidualView v;
  ASSERT_TRUE(find_residual(f.ts, f.base, &v));
  // Row 2, position 7 -> 13.
  uint8_t* row = f.index.data() + 2 * index_row_bytes(32, 4);
  row[3] = uint8_t((row[3] & 0x0f) | (13 << 4));
  expect_error(f, "index 13 at row 2, position 7 is >= the codebook size 12");
}

TEST(ResidualFormat, CodebookGroupsMustDivideTheRows) {
  Fixture f(256, 6, 8, 16, 4);  // 4 codebooks for 6 rows
  expect_error(f, "its 4 codebook groups do not divide the 6 rows");
}

TEST(ResidualFormat, LinkedTensorsWithoutACodebookAreErrors) {
  Fixture f(256, 4, 8, 16, 1);
  f.tensor(kRcCodebookSuffix).name = "x";
  TensorSet ts;
  ts.path = "test.gguf";
  for (const auto& t : f.ts.tensors) ts.add(t);
  ResidualView v;
  try {
    find_residual(ts, f.base, &v);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has no codebook"), std::string::npos) << e.what();
  }
}

TEST(ResidualFormat, NonFiniteCentroidIsAnError) {
  Fixture f(256, 4, 8, 16, 1);
  f.book[3] = 0x7c00;  // +inf
  expect_error(f, "is not finite");
}

// Caches of derived data (a backend's device copy, the CPU's regrouped indices) key on
// Tensor::uid: every tensor added to a set gets its own, never reused, and a residual view
// carries its index tensor's.
TEST(ResidualFormat, ViewCarriesItsIndexTensorsUid) {
  Fixture a(256, 6, 8, 16, 3), b(256, 6, 8, 16, 3);
  ResidualView va, vb;
  ASSERT_TRUE(find_residual(a.ts, a.base, &va));
  ASSERT_TRUE(find_residual(b.ts, b.base, &vb));
  const Tensor* ia = a.ts.find(a.base.name + kRcIndexSuffix);
  ASSERT_NE(ia, nullptr);
  EXPECT_EQ(va.index_uid, ia->uid);
  EXPECT_NE(va.index_uid, 0u);
  EXPECT_NE(va.index_uid, vb.index_uid);
  std::set<uint64_t> seen;
  for (const TensorSet* ts : {&a.ts, &b.ts})
    for (const Tensor& t : ts->tensors) EXPECT_TRUE(seen.insert(t.uid).second) << t.name;
}
