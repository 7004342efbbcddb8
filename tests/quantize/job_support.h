// What the crash-safe job tests share (job_test.cpp: stories260K, fast; job_slow_test.cpp:
// zh-tiny with calibration): environment for the child runs, folder listings, and the
// kill -> refuse -> resume -> compare sequence.
#pragma once
#include <gtest/gtest.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "support.h"

namespace bonsai::test {

constexpr int kKilled = 128 + SIGKILL;  // run_bonsai's status for a child killed by SIGKILL

// An environment variable for the runs in a scope (the children inherit it).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_) ::setenv(name_, old_->c_str(), 1);
    else ::unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// What a folder holds, by name.
inline std::set<std::string> entries(const std::filesystem::path& dir) {
  std::set<std::string> s;
  for (const auto& e : std::filesystem::directory_iterator(dir)) s.insert(e.path().filename().string());
  return s;
}

inline std::string partial(const std::filesystem::path& out) { return out.string() + ".partial"; }

// Kills `bonsai <args>` (which writes `out`) at `point` with the BONSAI_TEST_KILL_AT hook, checks
// what the job leaves, that a plain rerun is refused, that --resume finishes with the bytes `want`,
// and that nothing but `out` is left of the job; then removes `out`.
inline void kill_and_resume(const std::string& args, const std::filesystem::path& out, const std::string& point,
                            const std::vector<uint8_t>& want) {
  namespace fs = std::filesystem;
  SCOPED_TRACE(point);
  std::string log;
  {
    ScopedEnv kill("BONSAI_TEST_KILL_AT", point);
    ASSERT_EQ(run_bonsai(args, &log, {}), kKilled) << log;
  }
  ASSERT_NE(log.find("BONSAI_TEST_KILL_AT: SIGKILL at " + point), std::string::npos) << log;  // the hook, not a crash
  EXPECT_FALSE(fs::exists(out)) << "a killed job left a file under the final name";
  ASSERT_TRUE(fs::exists(partial(out) + "/state.json"));
  // Without --resume the leftover is refused, and the message says what to do.
  ASSERT_EQ(run_bonsai(args, &log), 1) << log;
  EXPECT_NE(log.find(partial(out)), std::string::npos) << log;
  EXPECT_NE(log.find("--resume"), std::string::npos) << log;
  EXPECT_NE(log.find("--restart"), std::string::npos) << log;
  EXPECT_FALSE(fs::exists(out));
  ASSERT_EQ(run_bonsai(args + " --resume", &log), 0) << log;
  EXPECT_NE(log.find("resuming from " + partial(out)), std::string::npos) << log;
  EXPECT_TRUE(read_bytes(out) == want) << "the resumed output differs from the uninterrupted run's";
  EXPECT_FALSE(fs::exists(partial(out)));
  for (const auto& name : entries(out.parent_path()))
    EXPECT_EQ(name.find(".tmp."), std::string::npos) << name << " left behind";
  fs::remove(out);
}

}  // namespace bonsai::test
