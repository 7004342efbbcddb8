// bonsai corpus build|check: the Chinese calibration/evaluation corpus (docs/corpus.md) —
// build it from Debian packages, or check calibration text for overlap with evaluation text.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <iostream>

#include "cli/command.h"
#include "cli/json_out.h"
#include "datasets/choice_tasks.h"
#include "datasets/corpus_build.h"
#include "datasets/overlap.h"
#include "datasets/text_stats.h"
#include "formats/atomic_file.h"
#include "formats/error.h"
#include "formats/json_file.h"
#include "formats/text_file.h"

namespace bonsai::cli {
namespace {

namespace fs = std::filesystem;

const char* kUsage =
    "bonsai corpus build --out DIR [--work DIR] [--compare MANIFEST]\n"
    "       bonsai corpus check --calib FILE... --eval FILE... [--window N]\n"
    "       bonsai corpus choices --eval FILE [--calib FILE...] [--count N] [--seed S] -o OUT.bin";

// A temporary work folder, removed on the way out (downloads are cheap to repeat; the unpacked
// packages take ~150 MB).
struct TempDir {
  std::string path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "bonsai-corpus-XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) fail(tmpl, "cannot create a temporary work folder");
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// Each output file against the same file in another manifest (e.g. the published corpus).
int compare(const nlohmann::ordered_json& built, const std::string& reference_path) {
  const nlohmann::json ref = read_json_file(reference_path);
  if (!ref.contains("files") || !ref["files"].is_object()) fail(reference_path, "has no \"files\" object");
  std::printf("\ncompared with %s:\n  %-32s %-9s %21s %23s\n", reference_path.c_str(), "file", "sha256",
              "paragraphs (ref)", "characters (ref)");
  bool all_same = true;
  for (const auto& [name, f] : built["files"].items()) {
    if (!ref["files"].contains(name)) {
      std::printf("  %-32s not in the reference\n", name.c_str());
      all_same = false;
      continue;
    }
    const auto& r = ref["files"][name];
    const bool same = r.value("sha256", "") == f["sha256"].get<std::string>();
    all_same = all_same && same;
    std::printf("  %-32s %-9s %10llu (%8llu) %11llu (%9llu)\n", name.c_str(), same ? "same" : "DIFFERS",
                static_cast<unsigned long long>(f["paragraphs"].get<uint64_t>()),
                static_cast<unsigned long long>(r.value("paragraphs", uint64_t(0))),
                static_cast<unsigned long long>(f["characters"].get<uint64_t>()),
                static_cast<unsigned long long>(r.value("characters", uint64_t(0))));
  }
  return all_same ? 0 : 1;
}

int build(const std::vector<std::string>& args) {
  po::options_description opts("options");
  opts.add_options()("out", po::value<std::string>()->required(), "output folder (text files and MANIFEST.json)")(
      "work", po::value<std::string>(),
      "folder for the downloaded .deb files and unpacked trees (kept; reused "
      "when run again). Default: a temporary folder, removed afterwards")(
      "compare", po::value<std::string>(),
      "a MANIFEST.json to compare the outputs with (exit status 1 if any "
      "file differs)");
  add_json(opts);
  po::variables_map vm;
  if (!parse(args, "bonsai corpus build --out DIR [--work DIR] [--compare MANIFEST]",
             "Builds the Chinese calibration and evaluation corpus from Debian packages\n"
             "(manpages-zh, libreoffice-help-zh-cn, fortunes-zh; debian-handbook held out for\n"
             "evaluation): apt-get download, dpkg-deb -x (nothing is installed), extraction,\n"
             "NFC and clean-up, CJK filters, de-duplication and the window-overlap check.\n"
             "Rules: docs/corpus.md.\n\n"
             "example:\n  bonsai corpus build --out corpora/zh --work /tmp/zh-work",
             opts, {}, vm))
    return 0;
  std::unique_ptr<TempDir> tmp;
  std::string work;
  if (vm.count("work")) {
    work = vm["work"].as<std::string>();
  } else {
    tmp = std::make_unique<TempDir>();
    work = tmp->path;
  }
  datasets::CorpusOptions o;
  const bool json = vm["json"].as<bool>();
  o.progress = [](const std::string& s) { std::fprintf(stderr, "corpus: %s\n", s.c_str()); };
  const std::string out = vm["out"].as<std::string>();
  const auto m = datasets::build_corpus(work, out, o);
  if (json) {
    std::printf("%s\n", m.dump().c_str());  // ordered as the manifest file
  } else {
    std::printf("%s: %zu files\n  %-32s %-11s %10s %10s %10s %10s  %-16s %s\n", out.c_str(), m["files"].size(), "file",
                "role", "paragraphs", "characters", "cjk", "bytes", "sha256", "dropped filter/duplicate/overlap");
    for (const auto& [name, f] : m["files"].items()) {
      std::string role = f["role"].get<std::string>();
      role = role.substr(0, role.find(' '));  // "calibration" or "evaluation"
      std::printf("  %-32s %-11s %10llu %10llu %10llu %10llu  %.16s %llu/%llu/%llu\n", name.c_str(), role.c_str(),
                  static_cast<unsigned long long>(f["paragraphs"].get<uint64_t>()),
                  static_cast<unsigned long long>(f["characters"].get<uint64_t>()),
                  static_cast<unsigned long long>(f["cjk_characters"].get<uint64_t>()),
                  static_cast<unsigned long long>(f["bytes"].get<uint64_t>()), f["sha256"].get<std::string>().c_str(),
                  static_cast<unsigned long long>(f["dropped"]["filter"].get<uint64_t>()),
                  static_cast<unsigned long long>(f["dropped"]["duplicate"].get<uint64_t>()),
                  static_cast<unsigned long long>(f["dropped"]["overlap"].get<uint64_t>()));
    }
  }
  if (vm.count("compare")) return compare(m, vm["compare"].as<std::string>());
  return 0;
}

int check(const std::vector<std::string>& args) {
  po::options_description opts("options");
  opts.add_options()("calib", po::value<std::vector<std::string>>()->multitoken()->required(),
                     "calibration text files (one paragraph per line)")(
      "eval", po::value<std::vector<std::string>>()->multitoken()->required(), "evaluation text files")(
      "window", po::value<size_t>()->default_value(datasets::kOverlapWindow),
      "window length in characters (code points)")("show", po::value<size_t>()->default_value(10),
                                                   "overlapping paragraphs to list (0: none)");
  add_json(opts);
  po::variables_map vm;
  if (!parse(args, "bonsai corpus check --calib FILE... --eval FILE... [--window N]",
             "Reports every calibration paragraph that shares a window of N consecutive characters\n"
             "with the evaluation text (or equals a shorter evaluation paragraph). Exit status 0\n"
             "when there is none, 1 when there is overlap.\n\n"
             "example:\n  bonsai corpus check --calib corpora/zh/calib-*.txt --eval corpora/zh/eval-*.txt",
             opts, {}, vm))
    return 0;
  if (vm["window"].as<size_t>() == 0) throw po::error("--window must be at least 1");
  const auto r = datasets::check_overlap(vm["calib"].as<std::vector<std::string>>(),
                                         vm["eval"].as<std::vector<std::string>>(), vm["window"].as<size_t>());
  const size_t show = vm["show"].as<size_t>();
  if (vm["json"].as<bool>()) {
    nlohmann::json j = {{"window", r.window},
                        {"calib_paragraphs", r.calib_paragraphs},
                        {"eval_paragraphs", r.eval_paragraphs},
                        {"eval_windows", r.eval_windows},
                        {"overlapping_paragraphs", r.findings.size()}};
    j["findings"] = nlohmann::json::array();
    for (const auto& f : r.findings)
      j["findings"].push_back({{"calib_file", f.calib_file},
                               {"calib_line", f.calib_line},
                               {"eval_file", f.eval_file},
                               {"eval_line", f.eval_line},
                               {"window", f.window}});
    print_json(j);
  } else {
    std::printf("window %zu characters: %zu evaluation paragraphs (%zu windows), %zu calibration paragraphs\n",
                r.window, r.eval_paragraphs, r.eval_windows, r.calib_paragraphs);
    std::printf("overlapping calibration paragraphs: %zu\n", r.findings.size());
    for (size_t i = 0; i < r.findings.size() && i < show; ++i) {
      const auto& f = r.findings[i];
      std::printf("  %s:%zu shares \"%s\" with %s:%zu\n", f.calib_file.c_str(), f.calib_line, f.window.c_str(),
                  f.eval_file.c_str(), f.eval_line);
    }
    if (r.findings.size() > show && show) std::printf("  ... %zu more\n", r.findings.size() - show);
  }
  return r.findings.empty() ? 0 : 1;
}

// The calibration files of the corpus `eval` belongs to (MANIFEST.json beside it), and an Error
// when the manifest calls `eval` itself calibration text.
std::vector<std::string> manifest_calibration(const std::string& eval) {
  const fs::path dir = fs::path(eval).parent_path(), man = dir / "MANIFEST.json";
  if (!fs::exists(man))
    fail(eval, "no MANIFEST.json beside it says which text is calibration: pass --calib FILE... (the text the tasks must not touch)");
  const nlohmann::json m = read_json_file(man.string());
  if (!m.contains("files") || !m["files"].is_object()) fail(man.string(), "has no \"files\" object");
  const std::string name = fs::path(eval).filename().string();
  if (!m["files"].contains(name)) fail(eval, "is not listed in ", man.string(), ": pass --calib FILE...");
  if (m["files"][name].value("role", "").rfind("evaluation", 0) != 0)
    fail(eval, "is ", m["files"][name].value("role", "?"), " text in ", man.string(), ": tasks are built from held-out text only");
  std::vector<std::string> calib;
  for (const auto& [f, e] : m["files"].items())
    if (e.value("role", "").rfind("calibration", 0) == 0) calib.push_back((dir / f).string());
  return calib;
}

int choices(const std::vector<std::string>& args) {
  po::options_description opts("options");
  datasets::ChoiceOptions co;
  opts.add_options()("eval", po::value<std::string>()->required(), "held-out text (one paragraph per line)")(
      "calib", po::value<std::vector<std::string>>()->multitoken(),
      "calibration text the tasks must not touch (default: the calibration files of the MANIFEST.json beside --eval)")(
      "count", po::value<int64_t>(&co.tasks)->default_value(co.tasks), "tasks to build")(
      "seed", po::value<uint64_t>(&co.seed)->default_value(co.seed), "seed of the draws")(
      "output,o", po::value<std::string>()->required(), "the task file (llama-perplexity --multiple-choice format); its manifest goes beside it as OUT.json");
  add_json(opts);
  po::variables_map vm;
  if (!parse(args, "bonsai corpus choices --eval FILE [--calib FILE...] [--count N] [--seed S] -o OUT.bin",
             "A Chinese multiple-choice set from held-out text: each task is a passage (the sentences\n"
             "of a paragraph before some sentence, up to 300 characters) and four candidate next\n"
             "sentences: the true one and three of similar length (half to twice) from other\n"
             "paragraphs of the same text. A model that follows the text prefers the true one; chance\n"
             "is 25%. Paragraphs sharing a 30-character window with the calibration text are never\n"
             "used, and a file the corpus manifest lists as calibration text is refused. The same\n"
             "text, seed and options give the same bytes. Score it with\n"
             "  bonsai perplexity -m MODEL --multiple-choice OUT.bin\n"
             "(or llama-perplexity --multiple-choice OUT.bin). What it measures: docs/results.md.\n\n"
             "example:\n  bonsai corpus choices --eval corpora/zh/eval-debian-handbook-zh-CN.txt -o zh-choices.bin",
             opts, {}, vm))
    return 0;
  const std::string eval = vm["eval"].as<std::string>(), out = vm["output"].as<std::string>();
  const std::vector<std::string> calib =
      vm.count("calib") ? vm["calib"].as<std::vector<std::string>>() : manifest_calibration(eval);
  if (calib.empty()) fail(eval, "no calibration text to keep out: pass --calib FILE...");
  const datasets::ChoiceSet set = datasets::build_choice_tasks(eval, calib, co);
  const std::string bytes = datasets::serialize_choice_tasks(set.tasks);
  std::vector<std::string> calib_names;
  for (const auto& c : calib) calib_names.push_back(fs::path(c).filename().string());
  const std::string source = read_text_file(eval);
  nlohmann::ordered_json man = {
      {"file", fs::path(out).filename().string()},
      {"format", "llama-perplexity --multiple-choice (uint32 count, uint32 offsets, tasks)"},
      {"sha256", datasets::sha256_hex(bytes)},
      {"tasks", set.tasks.size()},
      {"choices", co.choices},
      {"seed", co.seed},
      {"source", {{"file", fs::path(eval).filename().string()}, {"sha256", datasets::sha256_hex(source)}}},
      {"kept_out", calib_names},
      {"rules",
       {{"passage_characters", {co.context_min, co.context_max}},
        {"answer_characters", {co.answer_min, co.answer_max}},
        {"distractors", "sentences of other paragraphs, half to twice the true one's length"},
        {"overlap_window", datasets::kOverlapWindow}}},
      {"paragraphs", set.paragraphs},
      {"paragraphs_overlapping_calibration", set.overlapping},
      {"candidate_sentences", set.candidates}};
  {
    AtomicFile f(out);
    f.write(bytes.data(), bytes.size());
    f.commit();
  }
  write_text_file(out + ".json", man.dump(1) + "\n");
  if (vm["json"].as<bool>()) print_json(nlohmann::json(man));
  else
    std::printf("%s: %zu tasks of %d choices from %s (%zu paragraphs, %zu left out for overlapping %zu calibration files), "
                "sha256 %.16s; manifest %s.json\n",
                out.c_str(), set.tasks.size(), co.choices, eval.c_str(), set.paragraphs, set.overlapping, calib.size(),
                man["sha256"].get<std::string>().c_str(), out.c_str());
  return 0;
}

int run(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::cout << "usage: " << kUsage << "\n\n"
              << "  build   fetch the Debian packages and write the corpus and its MANIFEST.json\n"
              << "  check   report calibration text that overlaps evaluation text\n"
              << "  choices build a multiple-choice task file from held-out text\n\n"
              << "bonsai corpus <build|check|choices> --help for the options.\n";
    return args.empty() ? 2 : 0;
  }
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (args[0] == "build") return build(rest);
  if (args[0] == "check") return check(rest);
  if (args[0] == "choices") return choices(rest);
  throw po::error("unknown corpus command '" + args[0] + "' (build, check or choices)");
}

const Registrar reg({"corpus", "build the Chinese calibration corpus, check it for overlap, build a multiple-choice set", run});

}  // namespace
}  // namespace bonsai::cli
