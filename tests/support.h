// Where tests find their fixtures and scratch space.
#pragma once
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace bonsai::test {

// BONSAI_SHARED_DIR, else the shared/ folder beside the project root.
std::filesystem::path shared_dir();
// A fixture under shared_dir(); the test is skipped (GTEST_SKIP in the caller) when absent.
std::filesystem::path shared_file(const std::string& rel);
bool have_shared(const std::string& rel);
// A fresh empty folder for this test, removed at exit.
std::filesystem::path scratch_dir();
std::vector<uint8_t> read_bytes(const std::filesystem::path& p);
void write_bytes(const std::filesystem::path& p, const std::vector<uint8_t>& bytes);
// Runs the bonsai binary with the given arguments; returns exit status, stdout+stderr in *out.
int run_bonsai(const std::string& args, std::string* out);
// Runs `command` with /bin/sh; its exit status, and its stdout + stderr in *out.
int run_shell(const std::string& command, std::string* out);
// The same, with `in_child` run in the forked child just before it executes the command (a
// setrlimit, dropped privileges: they stay in the child). A child killed by a signal returns
// 128 + the signal number, as a shell reports it.
int run_bonsai(const std::string& args, std::string* out, const std::function<void()>& in_child);
// Runs f; the message of the bonsai::Error it throws, or "" when it throws none.
std::string error_of(const std::function<void()>& f);
// Runs f, which must throw bonsai::Error whose message names `file` (a gtest failure otherwise);
// returns the message, or "" when nothing was thrown.
std::string expect_error(const std::function<void()>& f, const std::string& file);


// Damaged copies of a good file, for every reader of untrusted input: a bit flipped in each of
// its first `flip_bytes` bytes (bit i % 8 of byte i) (its header: what the reader parses rather than carries), then
// `good` cut to each length below `cut_below`, written to `path` and handed to `read`. A cut file
// must make `read` throw bonsai::Error naming `path` (unless `cuts_may_parse`: a shorter YAML plan
// can still be a plan); a flip must either read or throw such an Error. Anything else fails the
// test; a crash ends it. The file is patched in place (a pwrite per flip, an ftruncate per
// length), so a few thousand reads take well under a second.
struct Damage {
  size_t flips = 0, flips_refused = 0, cuts = 0, cuts_refused = 0;
};
Damage damage_file(const std::filesystem::path& path, const std::vector<uint8_t>& good, size_t flip_bytes,
                   size_t cut_below, const std::function<void(const std::string&)>& read,
                   bool cuts_may_parse = false);

// A seed of the fuzz corpus (tests/fuzz/corpus/<target>/<name>): small valid files of every
// format a reader takes, which the damage tests start from.
std::vector<uint8_t> fuzz_seed(const std::string& target, const std::string& name);

}  // namespace bonsai::test

// Skips the current test when a shared fixture is missing (the product works without shared/;
// the tests that measure against it need it).
#define BONSAI_REQUIRE_SHARED(rel)                                                     \
  do {                                                                                 \
    if (!::bonsai::test::have_shared(rel)) GTEST_SKIP() << "fixture missing: " << rel; \
  } while (0)
