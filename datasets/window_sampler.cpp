#include "datasets/window_sampler.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <filesystem>
#include <random>

#include "formats/error.h"
#include "formats/json_file.h"
#include "formats/mapped_file.h"
#include "runtime/tokenizer.h"

namespace bonsai::datasets {
namespace fs = std::filesystem;

std::vector<uint64_t> draw_window_starts(uint64_t total_tokens, size_t window_len, size_t n_windows, uint64_t seed) {
  if (window_len == 0) throw Error("calibration windows: the window length must be at least 1 token");
  if (window_len > total_tokens)
    throw Error(
        cat("calibration windows: the text has ", total_tokens, " tokens, fewer than one window of ", window_len));
  const uint64_t r = total_tokens - window_len + 1;
  const uint64_t reject_below = (0 - r) % r;  // 2^64 mod r: values under it would favour small starts
  std::mt19937_64 engine(seed);
  std::vector<uint64_t> starts;
  starts.reserve(n_windows);
  for (size_t k = 0; k < n_windows; ++k) {
    uint64_t x = engine();
    while (x < reject_below) x = engine();
    starts.push_back(x % r);
  }
  return starts;
}

void require_calibration_file(const std::string& path) {
  const fs::path p(path);
  std::string name = p.filename().string();
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  if (name.starts_with("eval"))
    fail(path, "is evaluation text (its name starts with \"eval\"): held-out text is never used for calibration");
  const fs::path manifest = p.parent_path().empty() ? fs::path("MANIFEST.json") : p.parent_path() / "MANIFEST.json";
  std::error_code ec;
  if (!fs::exists(manifest, ec)) return;
  const nlohmann::json m = read_json_file(manifest.string());
  if (!m.is_object() || !m.contains("files")) return;  // some other manifest: it says nothing of roles
  const auto& files = m["files"];
  if (!files.is_object() || !files.contains(p.filename().string())) return;
  const auto& entry = files[p.filename().string()];
  if (entry.is_object() && entry.contains("role") && entry["role"].is_string() &&
      entry["role"].get<std::string>().starts_with("evaluation"))
    fail(path, "is evaluation text (", manifest.string(), " gives its role as \"", entry["role"].get<std::string>(),
         "\"): held-out text is never used for calibration");
}

SampledWindows sample_windows(const Tokenizer& tokenizer, const std::vector<std::string>& calib_files, size_t n_windows,
                              size_t window_len, uint64_t seed) {
  if (calib_files.empty()) throw Error("calibration windows: no calibration file given");
  if (window_len != 0 && n_windows > SIZE_MAX / window_len)
    throw Error(cat("calibration windows: ", n_windows, " windows of ", window_len, " tokens do not fit in memory"));
  for (const auto& f : calib_files) require_calibration_file(f);
  std::vector<int32_t> stream;
  for (const auto& f : calib_files) {
    const auto m = MappedFile::open(f);
    const auto ids =
        tokenizer.encode(std::string_view(reinterpret_cast<const char*>(m->data()), m->size()), false, false);
    stream.insert(stream.end(), ids.begin(), ids.end());
  }
  SampledWindows w;
  w.window_len = window_len;
  w.total_tokens = stream.size();
  try {
    w.starts = draw_window_starts(stream.size(), window_len, n_windows, seed);
  } catch (const Error& e) {
    fail(calib_files.size() == 1 ? calib_files[0] : cat(calib_files[0], " (and ", calib_files.size() - 1, " more)"),
         e.what());
  }
  w.ids.reserve(n_windows * window_len);
  for (uint64_t s : w.starts)
    w.ids.insert(w.ids.end(), stream.begin() + ptrdiff_t(s), stream.begin() + ptrdiff_t(s + window_len));
  return w;
}

}  // namespace bonsai::datasets
