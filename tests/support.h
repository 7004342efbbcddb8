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
// The same, with `in_child` run in the forked child just before it executes the command (a
// setrlimit, dropped privileges: they stay in the child). A child killed by a signal returns
// 128 + the signal number, as a shell reports it.
int run_bonsai(const std::string& args, std::string* out, const std::function<void()>& in_child);
// Runs f; the message of the bonsai::Error it throws, or "" when it throws none.
std::string error_of(const std::function<void()>& f);
// Runs f, which must throw bonsai::Error whose message names `file` (a gtest failure otherwise);
// returns the message, or "" when nothing was thrown.
std::string expect_error(const std::function<void()>& f, const std::string& file);

}  // namespace bonsai::test

// Skips the current test when a shared fixture is missing (the product works without shared/;
// the tests that measure against it need it).
#define BONSAI_REQUIRE_SHARED(rel)                                                     \
  do {                                                                                 \
    if (!::bonsai::test::have_shared(rel)) GTEST_SKIP() << "fixture missing: " << rel; \
  } while (0)
