// The Chinese calibration / evaluation corpus (docs/corpus.md), built from Debian packages:
// three calibration files (manpages-zh, libreoffice-help-zh-cn, fortunes-zh), one held-out
// evaluation file (debian-handbook), and MANIFEST.json.
#pragma once
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "datasets/debian_package.h"
#include "datasets/overlap.h"
#include "datasets/paragraph_text.h"

namespace bonsai::datasets {

// The manifest's role strings; a file whose role starts with "evaluation" is never calibration.
inline constexpr const char* kRoleCalibration = "calibration";
inline constexpr const char* kRoleEvaluation = "evaluation (held out; never used for calibration or training)";

struct CorpusOptions {
  ParagraphFilter calibration = kCalibrationFilter;
  ParagraphFilter evaluation = kEvaluationFilter;
  size_t overlap_window = kOverlapWindow;
  std::function<void(const std::string&)> progress;  // one line per step, when set
};

// The packages build_corpus() fetches.
const std::vector<std::string>& corpus_packages();

// Fetches and unpacks corpus_packages() in work_dir (debs/ and x/ below it; existing ones are
// reused), then build_corpus_from(). Returns the manifest it wrote.
nlohmann::ordered_json build_corpus(const std::string& work_dir, const std::string& out_dir,
                                    const CorpusOptions& options = {});

// Builds the corpus from packages already unpacked (name -> where), writing the text files and
// MANIFEST.json into out_dir (created if needed), each atomically. Every package of
// corpus_packages() must be present.
//
// Order of the rules: evaluation paragraphs first (extracted, cleaned, filtered, de-duplicated);
// then each calibration file in turn: extracted, cleaned, filtered, dropped when equal to any
// paragraph kept before (evaluation or calibration), dropped when it shares a window of
// overlap_window characters with the evaluation text. The manifest counts every drop.
nlohmann::ordered_json build_corpus_from(const std::map<std::string, UnpackedPackage>& packages,
                                         const std::string& out_dir, const CorpusOptions& options = {});

}  // namespace bonsai::datasets
