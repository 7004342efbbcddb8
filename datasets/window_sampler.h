// Calibration windows: n sequences of L token ids drawn from the calibration text.
//
// The rule, fixed so every platform and compiler draws the same windows:
//  1. Each file, in the order given, is read whole and tokenized at once (no BOS, special-token
//     text treated as plain text); the id sequences are concatenated in that order, nothing
//     between them, into one stream of T tokens.
//  2. A std::mt19937_64 engine is seeded with `seed` (the C++ standard fixes its output for a
//     given seed; the std:: distributions are not fixed, so none is used).
//  3. For each window k = 0..n-1 in turn: R = T - L + 1 possible starts; draw 64-bit values x
//     from the engine until x >= 2^64 mod R (rejection keeps the choice exactly uniform);
//     start_k = x mod R. Window k is stream[start_k, start_k + L). Windows are independent and
//     may overlap.
// Evaluation text is refused: a file whose name starts with "eval", or that the MANIFEST.json
// beside it lists with a role starting with "evaluation".
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace bonsai {
class Tokenizer;
}

namespace bonsai::datasets {

struct SampledWindows {
  size_t window_len = 0;
  uint64_t total_tokens = 0;     // T
  std::vector<uint64_t> starts;  // start of each window in the concatenated stream
  std::vector<int32_t> ids;      // windows back to back: n * window_len ids
  std::span<const int32_t> window(size_t k) const { return {ids.data() + k * window_len, window_len}; }
  size_t size() const { return starts.size(); }
  // Overwrites the first id of every window with `token` (a BOS, as the perplexity chunks the
  // model is judged on begin with one).
  void begin_each_with(int32_t token) {
    for (size_t k = 0; k < size(); ++k) ids[k * window_len] = token;
  }
};

// Steps 2-3 of the rule: the n starts in [0, total_tokens - window_len]. Error when
// window_len is 0 or larger than total_tokens.
std::vector<uint64_t> draw_window_starts(uint64_t total_tokens, size_t window_len, size_t n_windows, uint64_t seed);

// Error naming the file when it is evaluation text (see above) or its manifest is unreadable.
void require_calibration_file(const std::string& path);

// The whole rule. Error naming a refused or unreadable file, or when the files hold fewer than
// window_len tokens.
SampledWindows sample_windows(const Tokenizer& tokenizer, const std::vector<std::string>& calib_files, size_t n_windows,
                              size_t window_len, uint64_t seed);

}  // namespace bonsai::datasets
