// Shared by every fuzz target (tests/fuzz/*_fuzz.cpp): hands the fuzzer's bytes to a reader that
// takes a path, and tells expected refusals (bonsai::Error) from findings (anything else).
// The same target files build two ways: with libFuzzer (BONSAI_FUZZ=ON, clang) and with
// replay_main.cpp, which feeds the committed corpus through them in every ordinary build.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "formats/error.h"

namespace bonsai { class TensorSet; }

namespace bonsai::fuzz {

// Writes the bytes to `name` inside this process's scratch folder (in /dev/shm when there is one,
// so the writes stay in memory) and returns its path. The folder holds only what the target puts
// there: readers that look for sibling files find exactly those.
std::string input_file(const uint8_t* data, size_t size, const std::string& name);
// The scratch folder itself.
const std::string& scratch();

// Every tensor a reader returns must be self-consistent and readable: nbytes matches its type and
// shape, and each byte is read (a pointer past the map or buffer shows up as a sanitizer report
// or a fault). A mismatch aborts: it is a finding, not a refusal.
void touch_tensors(const TensorSet& ts);

// Aborts (a finding) when the message does not name `file`.
void check_error_names_file(const Error& e, const std::string& file);

// Runs f. A bonsai::Error is the reader refusing bad input, as it must; the message must name the
// file (`file`, when not empty), or that is a finding too. Any other exception escapes: libFuzzer
// (or the replay driver) reports it.
template <typename F>
void expect_only_errors(F&& f, const std::string& file = "") {
  try {
    f();
  } catch (const Error& e) {
    check_error_names_file(e, file);
  }
}

}  // namespace bonsai::fuzz
