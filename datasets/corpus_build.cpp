#include "datasets/corpus_build.h"

#include <filesystem>
#include <unordered_set>

#include "datasets/corpus_sources.h"
#include "datasets/text_stats.h"
#include "formats/atomic_file.h"
#include "formats/error.h"

namespace bonsai::datasets {
namespace fs = std::filesystem;

namespace {

using Extract = std::vector<std::string> (*)(const std::string& root);

// One output file of the corpus.
struct FileSpec {
  const char* file;
  const char* package;
  const char* license;  // from the package's debian/copyright ("Files: *")
  const char* subset;   // what part of the package, for the manifest (nullptr: all its text)
  Extract extract;
};

const FileSpec kEvaluation = {"eval-debian-handbook-zh-CN.txt", "debian-handbook", "GPL-2.0+ or CC-BY-SA-3.0",
                              "html/zh-CN/*.html", debian_handbook_paragraphs};
const FileSpec kCalibration[] = {
    {"calib-manpages-zh.txt", "manpages-zh", "GFDL-1.2+", nullptr, manpages_zh_paragraphs},
    {"calib-libreoffice-help-zh.txt", "libreoffice-help-zh-cn", "MPL-2.0", nullptr, libreoffice_help_paragraphs},
    {"calib-fortunes-zh.txt", "fortunes-zh", "GPL-3.0+ (collection; the classical poems themselves are public domain)",
     nullptr, fortunes_zh_paragraphs},
};

struct Drops {
  size_t extracted = 0, filter = 0, duplicate = 0, overlap = 0;
};

// Clean-up, filter and exact de-duplication against `seen` (which the kept paragraphs join).
std::vector<std::string> finalize(std::vector<std::string>&& raw, const ParagraphFilter& filter,
                                  std::unordered_set<std::string>& seen, Drops& d) {
  std::vector<std::string> kept;
  d.extracted = raw.size();
  for (std::string& r : raw) {
    std::string s = clean_paragraph(r);
    std::string().swap(r);
    if (!filter.keeps(s)) {
      ++d.filter;
      continue;
    }
    if (!seen.insert(s).second) {
      ++d.duplicate;
      continue;
    }
    kept.push_back(std::move(s));
  }
  return kept;
}

const UnpackedPackage& package(const std::map<std::string, UnpackedPackage>& packages, const char* name) {
  auto it = packages.find(name);
  if (it == packages.end()) throw Error(cat("corpus build: package ", name, " was not fetched"));
  return it->second;
}

nlohmann::ordered_json file_entry(const FileSpec& spec, const char* role, const UnpackedPackage& pkg,
                                  const TextStats& st, const Drops& d) {
  nlohmann::ordered_json j;
  j["role"] = role;
  j["source_package"] = spec.package;
  j["version"] = pkg.version;
  j["license"] = spec.license;
  if (spec.subset) j["subset"] = spec.subset;
  j["sha256"] = st.sha256;
  j["bytes"] = st.bytes;
  j["characters"] = st.characters;
  j["paragraphs"] = st.paragraphs;
  j["cjk_characters"] = st.cjk_characters;
  j["extracted_paragraphs"] = d.extracted;
  j["dropped"] = {{"filter", d.filter}, {"duplicate", d.duplicate}, {"overlap", d.overlap}};
  return j;
}

}  // namespace

const std::vector<std::string>& corpus_packages() {
  static const std::vector<std::string> p = {"manpages-zh", "libreoffice-help-zh-cn", "fortunes-zh", "debian-handbook"};
  return p;
}

nlohmann::ordered_json build_corpus(const std::string& work_dir, const std::string& out_dir,
                                    const CorpusOptions& options) {
  std::map<std::string, UnpackedPackage> packages;
  for (const std::string& name : corpus_packages()) {
    if (options.progress) options.progress("fetching " + name);
    packages[name] = fetch_package(name, work_dir);
  }
  return build_corpus_from(packages, out_dir, options);
}

nlohmann::ordered_json build_corpus_from(const std::map<std::string, UnpackedPackage>& packages,
                                         const std::string& out_dir, const CorpusOptions& options) {
  auto progress = [&](const std::string& s) {
    if (options.progress) options.progress(s);
  };
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) fail(out_dir, "cannot create the output folder: ", ec.message());

  // Evaluation first: calibration is then de-duplicated and de-overlapped against it.
  std::unordered_set<std::string> seen;
  const UnpackedPackage& eval_pkg = package(packages, kEvaluation.package);
  progress(cat("extracting ", kEvaluation.package));
  Drops eval_drops;
  auto eval = finalize(kEvaluation.extract(eval_pkg.root), options.evaluation, seen, eval_drops);
  OverlapIndex overlap(options.overlap_window);
  for (const auto& p : eval) overlap.add(p);

  // Everything is extracted before anything is written, so a failure (a missing or corrupt
  // source file) leaves no partial corpus behind.
  struct Output {
    const FileSpec* spec;
    const UnpackedPackage* pkg;
    std::vector<std::string> paragraphs;
    Drops drops;
  };
  std::vector<Output> outputs;
  size_t overlap_total = 0;
  for (const FileSpec& spec : kCalibration) {
    const UnpackedPackage& pkg = package(packages, spec.package);
    progress(cat("extracting ", spec.package));
    Drops d;
    auto kept = finalize(spec.extract(pkg.root), options.calibration, seen, d);
    std::vector<std::string> clean;
    clean.reserve(kept.size());
    for (auto& p : kept) {
      if (overlap.find(p)) {
        ++d.overlap;
        continue;
      }
      clean.push_back(std::move(p));
    }
    overlap_total += d.overlap;
    outputs.push_back({&spec, &pkg, std::move(clean), d});
  }
  outputs.push_back({&kEvaluation, &eval_pkg, std::move(eval), eval_drops});

  nlohmann::ordered_json files = nlohmann::ordered_json::object();
  for (const Output& o : outputs) {
    const TextStats st = write_paragraphs((fs::path(out_dir) / o.spec->file).string(), o.paragraphs);
    files[o.spec->file] =
        file_entry(*o.spec, o.spec == &kEvaluation ? kRoleEvaluation : kRoleCalibration, *o.pkg, st, o.drops);
  }

  nlohmann::ordered_json m;
  m["files"] = std::move(files);
  m["filters"] = {
      {"min_cjk_chars", options.calibration.min_cjk},
      {"min_cjk_fraction", options.calibration.min_fraction},
      {"normalization", "NFC"},
      {"dedup", "exact, global; calibration minus evaluation"},
      {"eval_min_cjk_chars", options.evaluation.min_cjk},
      {"eval_min_cjk_fraction", options.evaluation.min_fraction},
      {"overlap_window_chars", overlap.window()},
      {"overlap",
       "calibration paragraphs sharing any window of overlap_window_chars code points with the "
       "evaluation text (or equal to a shorter evaluation paragraph) are dropped"},
      {"overlap_dropped", overlap_total},
  };
  m["builder"] = "bonsai corpus build (datasets/corpus_build.cpp); rules in docs/corpus.md";

  const std::string text = m.dump(1, ' ', false) + "\n";
  AtomicFile f((fs::path(out_dir) / "MANIFEST.json").string());
  f.write(text.data(), text.size());
  f.commit();
  return m;
}

}  // namespace bonsai::datasets
