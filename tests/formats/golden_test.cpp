// Golden encode/decode vectors: every *.json in BONSAI_GOLDEN_DIR (default: golden/ of the shared
// folder) must match byte for byte. More vector files can be dropped into the folder.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "formats/types.h"
#include "support.h"

namespace fs = std::filesystem;
using bonsai::TypeTraits;

namespace {

fs::path golden_dir() {
  if (const char* e = std::getenv("BONSAI_GOLDEN_DIR"); e && *e) return e;
  return bonsai::test::shared_dir() / "golden";
}

std::vector<uint8_t> from_hex(const std::string& h) {
  EXPECT_EQ(h.size() % 2, 0u);
  std::vector<uint8_t> out(h.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) out[i] = uint8_t(std::stoi(h.substr(2 * i, 2), nullptr, 16));
  return out;
}

std::string to_hex(const uint8_t* p, size_t n) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    s += d[p[i] >> 4];
    s += d[p[i] & 15];
  }
  return s;
}

// Checks one vector file; returns the number of cases checked.
int check_file(const fs::path& path) {
  std::ifstream f(path);
  const auto doc = nlohmann::json::parse(f);
  EXPECT_TRUE(doc.contains("cases")) << path;
  // The file's own table of types must agree with ours.
  const auto types = doc.value("types", nlohmann::json::object());
  for (const auto& [name, t] : types.items()) {
    const TypeTraits* tt = bonsai::find_type(name);
    EXPECT_NE(tt, nullptr) << path << ": type " << name << " unknown";
    if (!tt) continue;
    EXPECT_EQ(uint32_t(tt->id), t.at("type_id").get<uint32_t>()) << name;
    EXPECT_EQ(tt->block_elems, t.at("block_elems").get<int>()) << name;
    EXPECT_EQ(tt->block_bytes, t.at("block_bytes").get<int>()) << name;
  }
  int n = 0;
  for (const auto& c : doc.at("cases")) {
    const std::string what = path.filename().string() + " " + c.at("type").get<std::string>() + "/" +
                             c.at("case").get<std::string>();
    const TypeTraits* tt = bonsai::find_type(c.at("type_id").get<uint32_t>());
    EXPECT_NE(tt, nullptr) << what;
    if (!tt) continue;
    EXPECT_STREQ(tt->name, c.at("type").get<std::string>().c_str()) << what;
    const int64_t elems = c.at("n").get<int64_t>();
    const auto encoded = from_hex(c.at("encoded_hex").get<std::string>());
    EXPECT_EQ(encoded.size(), size_t(elems / tt->block_elems * tt->block_bytes)) << what;
    if (!c.at("input_f32le_hex").is_null()) {
      const auto in = from_hex(c.at("input_f32le_hex").get<std::string>());
      EXPECT_EQ(in.size(), size_t(elems) * 4) << what;
      std::vector<float> x(static_cast<size_t>(elems));
      std::memcpy(x.data(), in.data(), in.size());
      std::vector<uint8_t> got(encoded.size());
      tt->from_float(x.data(), got.data(), elems);
      EXPECT_EQ(to_hex(got.data(), got.size()), c.at("encoded_hex").get<std::string>()) << "encode " << what;
    }
    std::vector<float> y(static_cast<size_t>(elems));
    tt->to_float(encoded.data(), y.data(), elems);
    EXPECT_EQ(to_hex(reinterpret_cast<const uint8_t*>(y.data()), y.size() * 4),
              c.at("decoded_f32le_hex").get<std::string>())
        << "decode " << what;
    ++n;
  }
  return n;
}

}  // namespace

TEST(Golden, EveryVectorFileMatches) {
  const fs::path dir = golden_dir();
  ASSERT_TRUE(fs::is_directory(dir)) << "golden folder missing: " << dir
                                     << " (set BONSAI_GOLDEN_DIR or provide the shared folder)";
  int files = 0, cases = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".json") continue;
    ++files;
    cases += check_file(e.path());
  }
  ASSERT_GT(files, 0) << "no *.json vector file in " << dir;
  EXPECT_GT(cases, 0);
  std::printf("golden: %d files, %d cases\n", files, cases);
}

TEST(Golden, CoversPtq1AndPq2) {
  const fs::path f = golden_dir() / "ternary_blocks.json";
  if (!fs::exists(f)) GTEST_SKIP() << "no ternary_blocks.json in " << golden_dir();
  std::ifstream in(f);
  const auto doc = nlohmann::json::parse(in);
  int ptq = 0, pq = 0;
  for (const auto& c : doc.at("cases")) {
    ptq += c.at("type") == "PTQ1_0";
    pq += c.at("type") == "PQ2_0";
  }
  EXPECT_GT(ptq, 10);
  EXPECT_GT(pq, 10);
}
