// The corpus builder on small package trees written by the test: which files it reads, the
// order of the rules, the output files and every manifest field (docs/corpus.md).
#include "datasets/corpus_build.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>

#include "datasets/corpus_sources.h"
#include "datasets/debian_package.h"
#include "datasets/overlap.h"
#include "datasets/source_file.h"
#include "datasets/text_stats.h"
#include "formats/error.h"
#include "formats/json_file.h"
#include "support.h"

namespace bonsai::datasets {
namespace {
namespace fs = std::filesystem;

void write(const fs::path& p, const std::string& s) {
  fs::create_directories(p.parent_path());
  std::ofstream f(p, std::ios::binary);
  f << s;
}

void write_gz(const fs::path& p, const std::string& s) {
  fs::create_directories(p.parent_path());
  gzFile g = gzopen(p.string().c_str(), "wb");
  ASSERT_NE(g, nullptr);
  ASSERT_EQ(gzwrite(g, s.data(), unsigned(s.size())), int(s.size()));
  gzclose(g);
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// Forty distinct ideographs; calibration text that embeds 30 of them in a row leaks evaluation text.
const std::string kEvalLong = "评估段落一甲乙丙丁戊己庚辛壬癸子丑寅卯辰巳午未申酉戌亥金木水火土日月星天地人山川";
const std::string kEvalShort = "评估段落二很短但够四个字";
const std::string kCalibA = "这是第一段校准文字，来自手册页，长度足够通过过滤。";

std::map<std::string, UnpackedPackage> make_packages(const fs::path& root) {
  std::map<std::string, UnpackedPackage> p;
  auto pkg = [&](const std::string& name, const std::string& version) {
    p[name] = {name, version, "", (root / name).string()};
    return root / name;
  };
  const fs::path hb = pkg("debian-handbook", "11.20220922") / "usr/share/doc/debian-handbook/html/zh-CN";
  write(hb / "b.html", "<div class=\"para\">" + kEvalShort + "</div><div class=\"para\">" + kEvalShort + "</div>");
  write(hb / "a.html",
        "<html><body><div class=\"para\">" + kEvalLong +
            "</div><div class=\"para\">短评估</div><pre class=\"screen\">屏幕上的输出文字</pre></body></html>");
  write(hb / "sub/c.html", "<p>子目录里的页面不在范围之内，因此不读。</p>");

  const fs::path man = pkg("manpages-zh", "1.6.4.0-1") / "usr/share/man";
  write_gz(man / "zh_CN/man1/t.1.gz", ".TH T 1\n.SH 名称\n" + kCalibA + "\n.PP\n" + kEvalShort + "\n.PP\n引用：" +
                                          kEvalLong.substr(0, 3 * 32) + "\n.PP\nEnglish only text here\n");
  write_gz(man / "zh_CN/man1/stub.1.gz", ".so man1/t.1\n");
  write(man / "zh_CN/man8/plain.8", "未压缩的手册页也照样读取，这一段是第二段。\n");
  write_gz(man / "zh_TW/man1/t.1.gz", "繁體中文的手冊頁不在範圍之內，所以不讀。\n");
  fs::create_symlink("t.1.gz", man / "zh_CN/man1/link.1.gz");

  const fs::path lo = pkg("libreoffice-help-zh-cn", "4:7.4.7-1+deb12u14") / "usr/share/libreoffice/help/zh-CN";
  write(lo / "text/shared/b.html", "<p>" + kCalibA + "</p><p>帮助页面的第二个段落在这里，足够长。</p>");
  write(lo / "a.html",
        "<h1>帮助页面顶层的标题文字足够长</h1><div class=\"switch\"><p>模块切换块里的文字被丢弃掉</p></div>");
  write(lo / "text/readme.txt", "不是网页的文件不读，即使它有很多汉字。");

  const fs::path fo = pkg("fortunes-zh", "2.98") / "usr/share/games/fortunes";
  write(fo / "tang300",
        "\x1b[32m《静夜思》\x1b[m\n作者：李白\n床前明月光，疑是地上霜。\n举头望明月，低头思故乡。\n%\n");
  write(fo / "song100", "宋词一百首里的一首词，放在这里作为测试。\n");
  write(fo / "chinese", "一句俗话：三个臭皮匠，顶个诸葛亮。\n%\n太短\n");
  return p;
}

TEST(CorpusBuild, SourcesReadOnlyTheirSubset) {
  const auto root = test::scratch_dir();
  const auto p = make_packages(root);
  // zh_TW, .so stubs, symlinks and other folders are not read; plain and .gz pages are, in path order.
  EXPECT_EQ(manpages_zh_paragraphs(p.at("manpages-zh").root),
            (std::vector<std::string>{kCalibA, kEvalShort, "引用：" + kEvalLong.substr(0, 3 * 32),
                                      "English only text here", "未压缩的手册页也照样读取，这一段是第二段。"}));
  const auto hb = debian_handbook_paragraphs(p.at("debian-handbook").root);
  ASSERT_EQ(hb.size(), 4u);  // a.html (2 paragraphs) before b.html (2); sub/ is not read
  EXPECT_EQ(hb[0], kEvalLong);
  const auto lo = libreoffice_help_paragraphs(p.at("libreoffice-help-zh-cn").root);
  EXPECT_EQ(
      lo, (std::vector<std::string>{"帮助页面顶层的标题文字足够长", kCalibA, "帮助页面的第二个段落在这里，足够长。"}));
}

TEST(CorpusBuild, OutputsAndManifest) {
  const auto root = test::scratch_dir();
  const auto out = root / "out";
  const auto m = build_corpus_from(make_packages(root / "pkgs"), out.string());

  auto lines = [&](const char* name) { return read_lines((out / name).string()); };
  EXPECT_EQ(lines("eval-debian-handbook-zh-CN.txt"), (std::vector<std::string>{kEvalLong, kEvalShort}));
  // kEvalShort is dropped as equal to evaluation text, the 引用 paragraph for sharing 30 characters
  // with it, the English one by the filter.
  EXPECT_EQ(lines("calib-manpages-zh.txt"),
            (std::vector<std::string>{kCalibA, "未压缩的手册页也照样读取，这一段是第二段。"}));
  // kCalibA again is a duplicate across files.
  EXPECT_EQ(lines("calib-libreoffice-help-zh.txt"),
            (std::vector<std::string>{"帮助页面顶层的标题文字足够长", "帮助页面的第二个段落在这里，足够长。"}));
  EXPECT_EQ(
      lines("calib-fortunes-zh.txt"),
      (std::vector<std::string>{"《静夜思》作者：李白床前明月光，疑是地上霜。举头望明月，低头思故乡。",
                                "宋词一百首里的一首词，放在这里作为测试。", "一句俗话：三个臭皮匠，顶个诸葛亮。"}));

  // The manifest on disk is the one returned.
  EXPECT_EQ(nlohmann::ordered_json::parse(slurp(out / "MANIFEST.json")), m);
  const auto& files = m["files"];
  ASSERT_EQ(files.size(), 4u);
  for (const auto& [name, f] : files.items()) {
    SCOPED_TRACE(name);
    const std::string text = slurp(out / name);
    EXPECT_EQ(f["sha256"], sha256_hex(text));
    EXPECT_EQ(f["bytes"], fs::file_size(out / name));
    EXPECT_EQ(f["paragraphs"], read_lines((out / name).string()).size());
    EXPECT_EQ(f["characters"], count_code_points(text));
    EXPECT_EQ(f["cjk_characters"], count_cjk(text));
    const bool eval = name.starts_with("eval-");
    EXPECT_EQ(f["role"], eval ? kRoleEvaluation : kRoleCalibration);
  }
  EXPECT_EQ(files["calib-manpages-zh.txt"]["source_package"], "manpages-zh");
  EXPECT_EQ(files["calib-manpages-zh.txt"]["version"], "1.6.4.0-1");
  EXPECT_EQ(files["calib-manpages-zh.txt"]["license"], "GFDL-1.2+");
  EXPECT_EQ(files["calib-libreoffice-help-zh.txt"]["version"], "4:7.4.7-1+deb12u14");
  EXPECT_EQ(files["eval-debian-handbook-zh-CN.txt"]["subset"], "html/zh-CN/*.html");
  // "太短" has 2 ideographs: the fortunes filter drop; the evaluation filter drops "短评估" (3)
  // and the evaluation de-duplication the second kEvalShort.
  auto dropped = [&](const char* name) {
    const auto& d = files[name]["dropped"];
    return std::vector<uint64_t>{files[name]["extracted_paragraphs"].get<uint64_t>(), d["filter"].get<uint64_t>(),
                                 d["duplicate"].get<uint64_t>(), d["overlap"].get<uint64_t>()};
  };
  EXPECT_EQ(dropped("eval-debian-handbook-zh-CN.txt"), (std::vector<uint64_t>{4, 1, 1, 0}));
  EXPECT_EQ(dropped("calib-manpages-zh.txt"), (std::vector<uint64_t>{5, 1, 1, 1}));
  EXPECT_EQ(dropped("calib-libreoffice-help-zh.txt"), (std::vector<uint64_t>{3, 0, 1, 0}));
  EXPECT_EQ(dropped("calib-fortunes-zh.txt"), (std::vector<uint64_t>{4, 1, 0, 0}));
  EXPECT_EQ(m["filters"]["min_cjk_chars"], 8);
  EXPECT_EQ(m["filters"]["min_cjk_fraction"], 0.3);
  EXPECT_EQ(m["filters"]["eval_min_cjk_chars"], 4);
  EXPECT_EQ(m["filters"]["eval_min_cjk_fraction"], 0.2);
  EXPECT_EQ(m["filters"]["overlap_window_chars"], 30);
  EXPECT_EQ(m["filters"]["overlap_dropped"], 1);

  // The result has no overlap by the checker, and building again gives the same bytes.
  std::vector<std::string> calib;
  for (const char* n : {"calib-manpages-zh.txt", "calib-libreoffice-help-zh.txt", "calib-fortunes-zh.txt"})
    calib.push_back((out / n).string());
  EXPECT_TRUE(check_overlap(calib, {(out / "eval-debian-handbook-zh-CN.txt").string()}).findings.empty());
  const auto again = root / "again";
  build_corpus_from(make_packages(root / "pkgs2"), again.string());
  for (const auto& [name, f] : files.items()) EXPECT_EQ(slurp(again / name), slurp(out / name)) << name;
}

TEST(CorpusBuild, MissingPackageOrFileIsAnError) {
  const auto root = test::scratch_dir();
  auto p = make_packages(root);
  auto no_fortunes = p;
  no_fortunes.erase("fortunes-zh");
  EXPECT_THROW(build_corpus_from(no_fortunes, (root / "o1").string()), Error);
  fs::remove(root / "fortunes-zh/usr/share/games/fortunes/song100");
  try {
    build_corpus_from(p, (root / "o2").string());
    ADD_FAILURE() << "a missing fortune file was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("song100"), std::string::npos) << e.what();
  }
  // Nothing was written: no half corpus.
  EXPECT_TRUE(fs::is_empty(root / "o2"));
}

TEST(CorpusBuild, Sha256KnownAnswers) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const auto st = text_stats("中文\nab\n");
  EXPECT_EQ(st.bytes, 10u);
  EXPECT_EQ(st.characters, 6u);
  EXPECT_EQ(st.paragraphs, 2u);
  EXPECT_EQ(st.cjk_characters, 2u);
}

TEST(CorpusBuild, GzipErrorsNameTheFile) {
  const auto dir = test::scratch_dir();
  write_gz(dir / "ok.1.gz", "内容\n");
  EXPECT_EQ(read_source_file((dir / "ok.1.gz").string()), "内容\n");
  const std::string good = slurp(dir / "ok.1.gz");
  write(dir / "cut.1.gz", good.substr(0, good.size() - 6));
  write(dir / "junk.1.gz", "not gzip at all");
  for (const char* name : {"cut.1.gz", "junk.1.gz"}) {
    try {
      read_source_file((dir / name).string());
      ADD_FAILURE() << name << " was read";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  }
  // A stream that inflates past the limit stops there instead of filling memory.
  write_gz(dir / "big.1.gz", std::string(1 << 20, 'a'));
  EXPECT_THROW(read_source_file((dir / "big.1.gz").string(), 1000), Error);
  EXPECT_EQ(read_source_file((dir / "big.1.gz").string()).size(), size_t(1) << 20);
}

TEST(CorpusBuild, RunCommandReportsFailures) {
  EXPECT_EQ(run_command({"sh", "-c", "printf '%s' \"$0\"", "a b'c"}), "a b'c");  // no shell quoting games
  EXPECT_EQ(run_command({"pwd"}, "/"), "/\n");
  EXPECT_THROW(run_command({"sh", "-c", "exit 3"}), Error);
  EXPECT_THROW(run_command({"no-such-program-bonsai"}), Error);
}

}  // namespace
}  // namespace bonsai::datasets
