// Crash-safe quantization jobs through the CLI on stories260K with a data-free plan (the block
// loop, the checkpoint and the writers, no calibration; job_slow_test.cpp calibrates zh-tiny):
// kills between blocks, inside a checkpoint and in the final write resume to the same bytes
// (BONSAI_TEST_KILL_AT, formats/kill_point.h); other jobs' and damaged checkpoints are refused;
// SOURCE_DATE_EPOCH pins .bonsai's date; a full disk or a read-only folder gives an error naming
// the file and leaves nothing half-written. docs/reliability.md lists what each test shows.
#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <linux/capability.h>

#include <fstream>

#include "formats/model_file.h"
#include "job_support.h"
#include "quantize/checkpoint.h"

using namespace bonsai;
namespace fs = std::filesystem;

namespace {

const char* kStories = "models/stories260K/stories260K.gguf";

// stories260K (5 blocks) to Q8_0, ffn_down (172-wide rows) to F16. The plan lives in a folder of
// its own, so the tests can watch the output's folder alone.
std::string stories_args(const fs::path& out) {
  static const fs::path plan = [] {
    const fs::path p = test::scratch_dir() / "plan.yaml";
    std::ofstream(p) << "default: Q8_0\nrules:\n  - match: 'ffn_down'\n    type: F16\n";
    return p;
  }();
  return "quantize -m " + test::shared_file(kStories).string() + " -o " + out.string() + " --plan " + plan.string() +
         " --threads 1";
}

// Makes the child unable to write where its permission bits say it may not: a child of root
// drops the capabilities that let root ignore them (they leave the bounding set, so the programs
// it executes never get them back). Nothing to do for an ordinary user.
void obey_permissions() {
  if (::geteuid() != 0) return;
  for (int cap : {CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER}) ::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0);
}

// Whether a child that obey_permissions() can still create a file in `dir`.
bool child_can_write(const fs::path& dir) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    obey_permissions();
    const std::string cmd = "touch '" + (dir / "probe").string() + "' 2>/dev/null";
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int st = 0;
  ::waitpid(pid, &st, 0);
  std::error_code ec;
  fs::remove(dir / "probe", ec);
  return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

// A child whose files may not grow past `bytes`: write() fails with EFBIG instead of the default
// SIGXFSZ killing it, as a full disk makes write() fail with ENOSPC.
std::function<void()> file_size_limit(rlim_t bytes) {
  return [bytes] {
    std::signal(SIGXFSZ, SIG_IGN);
    const rlimit r{bytes, bytes};
    ::setrlimit(RLIMIT_FSIZE, &r);
  };
}

const std::vector<uint8_t> kOld = {'o', 'l', 'd'};  // an earlier result under the output's name

}  // namespace

TEST(CrashSafeJob, KilledBetweenBlocksInACheckpointAndInTheFinalWrite) {
  BONSAI_REQUIRE_SHARED(kStories);
  const auto dir = test::scratch_dir();
  const fs::path out = dir / "out.bonsai";
  const test::ScopedEnv date("SOURCE_DATE_EPOCH", "1700000000");
  std::string log;
  ASSERT_EQ(test::run_bonsai(stories_args(out), &log), 0) << log;
  const std::vector<uint8_t> want = test::read_bytes(out);
  fs::remove(out);
  test::kill_and_resume(stories_args(out), out, "block:2", want);
  // Block 3's file written, the state not yet updated: the unrecorded file is dropped on resume.
  test::kill_and_resume(stories_args(out), out, "write:block-003.gguf:2", want);
  test::kill_and_resume(stories_args(out), out, "write:out.bonsai:3", want);
}

TEST(CrashSafeJob, RefusesAnotherJobsOrADamagedCheckpoint) {
  BONSAI_REQUIRE_SHARED(kStories);
  const auto dir = test::scratch_dir();
  const fs::path out = dir / "out.gguf";
  const std::string args = stories_args(out);
  std::string log;
  {
    test::ScopedEnv kill("BONSAI_TEST_KILL_AT", "block:3");
    ASSERT_EQ(test::run_bonsai(args, &log, {}), test::kKilled) << log;
  }
  const std::string state = test::partial(out) + "/state.json";
  const std::vector<uint8_t> saved = test::read_bytes(state);
  // Other options: refused, naming the state file and what differs; the checkpoint is untouched.
  ASSERT_EQ(test::run_bonsai(args + " --resume --tensor-type 'attn_q=f16'", &log), 1) << log;
  EXPECT_NE(log.find(state), std::string::npos) << log;
  EXPECT_NE(log.find("plan differs"), std::string::npos) << log;
  EXPECT_NE(log.find("--restart"), std::string::npos) << log;
  EXPECT_TRUE(test::read_bytes(state) == saved);
  EXPECT_FALSE(fs::exists(out));
  // A damaged block: refused, naming the file.
  const fs::path block = fs::path(test::partial(out)) / "block-001.gguf";
  std::vector<uint8_t> b = test::read_bytes(block);
  b[b.size() / 2] ^= 0x40;
  test::write_bytes(block, b);
  ASSERT_EQ(test::run_bonsai(args + " --resume", &log), 1) << log;
  EXPECT_NE(log.find(block.string()), std::string::npos) << log;
  EXPECT_NE(log.find("checksum"), std::string::npos) << log;
  EXPECT_TRUE(fs::exists(block));
  // A state that is not one (truncated, or listing a file outside the folder): refused, naming it.
  for (const std::string bad : {"{\"format\": \"bonsai quantize checkpoint\", \"vers",
                                "{\"format\": \"bonsai quantize checkpoint\", \"version\": 1, \"job\": {}, "
                                "\"blocks_done\": 1, \"files\": {\"../out.gguf\": {\"bytes\": 3, \"xxh3\": \"0\"}}}"}) {
    test::write_bytes(state, std::vector<uint8_t>(bad.begin(), bad.end()));
    ASSERT_EQ(test::run_bonsai(args + " --resume", &log), 1) << log;
    EXPECT_NE(log.find(state + ": "), std::string::npos) << log;
    EXPECT_NE(log.find("--restart discards it"), std::string::npos) << log;
  }
  // --restart discards it and starts over; --resume with nothing to resume starts from the beginning.
  ASSERT_EQ(test::run_bonsai(args + " --restart", &log), 0) << log;
  EXPECT_FALSE(fs::exists(test::partial(out)));
  const std::vector<uint8_t> first = test::read_bytes(out);
  ASSERT_EQ(test::run_bonsai(args + " --resume", &log), 0) << log;
  EXPECT_EQ(log.find("resuming from"), std::string::npos) << log;
  EXPECT_TRUE(test::read_bytes(out) == first);
  EXPECT_EQ(test::run_bonsai(args + " --resume --restart", &log), 2) << log;
}

TEST(CrashSafeJob, SecondJobOnTheSameOutputIsRefused) {
  BONSAI_REQUIRE_SHARED(kStories);
  const auto dir = test::scratch_dir();
  const fs::path out = dir / "out.gguf";
  // This process holds the checkpoint's lock, as a job still running does.
  const quant::JobCheckpoint running(out.string(), quant::PartialMode::fresh);
  std::string log;
  for (const char* mode : {"", " --resume", " --restart"}) {
    ASSERT_EQ(test::run_bonsai(stories_args(out) + mode, &log), 1) << log;
    EXPECT_NE(log.find(test::partial(out) + ": another bonsai quantize is writing " + out.string()), std::string::npos)
        << log;
  }
  EXPECT_FALSE(fs::exists(out));
  EXPECT_TRUE(fs::exists(test::partial(out) + "/lock"));
}

TEST(Determinism, SourceDateEpochPinsTheCreationDate) {
  BONSAI_REQUIRE_SHARED(kStories);
  const auto dir = test::scratch_dir();
  const fs::path a = dir / "a.bonsai", b = dir / "b.bonsai";
  std::string log;
  {
    const test::ScopedEnv date("SOURCE_DATE_EPOCH", "1700000000");
    ASSERT_EQ(test::run_bonsai(stories_args(a), &log), 0) << log;
    ASSERT_EQ(test::run_bonsai(stories_args(b), &log), 0) << log;
  }
  EXPECT_EQ(open_model(a.string()).meta.get_str("bonsai.created"), "2023-11-14T22:13:20Z");
  EXPECT_TRUE(test::read_bytes(a) == test::read_bytes(b));
  // A malformed date is found at the final write: the error names it, the finished blocks stay,
  // and --resume with a valid date writes the same file.
  fs::remove(b);
  {
    const test::ScopedEnv date("SOURCE_DATE_EPOCH", "yesterday");
    ASSERT_EQ(test::run_bonsai(stories_args(b), &log), 1) << log;
  }
  EXPECT_NE(log.find("SOURCE_DATE_EPOCH='yesterday'"), std::string::npos) << log;
  EXPECT_NE(log.find("--resume"), std::string::npos) << log;
  EXPECT_FALSE(fs::exists(b));
  {
    const test::ScopedEnv date("SOURCE_DATE_EPOCH", "1700000000");
    ASSERT_EQ(test::run_bonsai(stories_args(b) + " --resume", &log), 0) << log;
  }
  EXPECT_TRUE(test::read_bytes(a) == test::read_bytes(b));
  // Unpinned, the date is the time of writing.
  ASSERT_EQ(test::run_bonsai(stories_args(b), &log), 0) << log;
  EXPECT_NE(open_model(b.string()).meta.get_str("bonsai.created"), "2023-11-14T22:13:20Z");
}

TEST(FullDisk, FirstCheckpointFailsCleanly) {
  BONSAI_REQUIRE_SHARED(kStories);
  const auto dir = test::scratch_dir();
  const fs::path out = dir / "out.gguf";
  const std::string args = stories_args(out);
  test::write_bytes(out, kOld);
  const auto before = test::entries(dir);
  std::string log;
  // 16 KiB: the job's state fits, its first file (the embedding and head in their plan types,
  // written before block 0) does not.
  ASSERT_EQ(test::run_bonsai(args, &log, file_size_limit(16 << 10)), 1) << log;
  EXPECT_NE(log.find(test::partial(out) + "/outer.gguf: write failed: File too large"), std::string::npos) << log;
  EXPECT_EQ(test::entries(dir), before) << "a failed job with no finished block must leave nothing";
  EXPECT_TRUE(test::read_bytes(out) == kOld);
}

TEST(FullDisk, FinalWriteFailsCleanlyAndResumes) {
  BONSAI_REQUIRE_SHARED(kStories);
  const auto dir = test::scratch_dir();
  const fs::path out = dir / "out.gguf", ref = dir / "ref.gguf";
  std::string log;
  ASSERT_EQ(test::run_bonsai(stories_args(ref), &log), 0) << log;
  const std::string args = stories_args(out);
  test::write_bytes(out, kOld);
  // 128 KiB: every block's checkpoint fits, the whole model does not.
  ASSERT_EQ(test::run_bonsai(args, &log, file_size_limit(128 << 10)), 1) << log;
  EXPECT_NE(log.find(out.string() + ": write failed: File too large"), std::string::npos) << log;
  EXPECT_NE(log.find("5 finished blocks are kept in " + test::partial(out)), std::string::npos) << log;
  EXPECT_TRUE(test::read_bytes(out) == kOld);
  for (const auto& name : test::entries(dir)) EXPECT_EQ(name.find(".tmp."), std::string::npos) << name << " left behind";
  // What is left is resumable work, not garbage: --resume finishes without the limit.
  ASSERT_EQ(test::run_bonsai(args + " --resume", &log), 0) << log;
  EXPECT_NE(log.find("5 of 5 blocks already done"), std::string::npos) << log;
  EXPECT_TRUE(test::read_bytes(out) == test::read_bytes(ref));
  EXPECT_FALSE(fs::exists(test::partial(out)));
}

TEST(ReadOnlyFolder, FailsBeforeAnyWorkAndTouchesNothing) {
  BONSAI_REQUIRE_SHARED(kStories);
  const auto dir = test::scratch_dir() / "ro";
  fs::create_directory(dir);
  const fs::path out = dir / "out.gguf";
  test::write_bytes(out, kOld);
  fs::permissions(dir, fs::perms::owner_read | fs::perms::owner_exec | fs::perms::group_read | fs::perms::group_exec |
                           fs::perms::others_read | fs::perms::others_exec);
  struct Restore {
    fs::path d;
    ~Restore() { fs::permissions(d, fs::perms::owner_all, fs::perm_options::add); }
  } restore{dir};
  if (child_can_write(dir)) GTEST_SKIP() << "cannot make a folder read-only for a child process here";
  std::string log;
  ASSERT_EQ(test::run_bonsai(stories_args(out), &log, obey_permissions), 1) << log;
  EXPECT_NE(log.find(out.string() + ": cannot create its checkpoint folder " + test::partial(out)), std::string::npos) << log;
  EXPECT_NE(log.find("ermission denied"), std::string::npos) << log;
  EXPECT_EQ(log.find("plan "), std::string::npos) << "the job did work before finding it cannot write: " << log;
  EXPECT_EQ(test::entries(dir), (std::set<std::string>{"out.gguf"}));
  EXPECT_TRUE(test::read_bytes(out) == kOld);
}

// A --max-memory below what one block needs is refused before any work: the message says what the
// job needs and the limit, and nothing is written (no checkpoint folder, the old output intact).
TEST(MemoryLimit, TooSmallIsRefusedBeforeAnyWork) {
  BONSAI_REQUIRE_SHARED(kStories);
  const auto dir = test::scratch_dir();
  const fs::path out = dir / "out.gguf";
  test::write_bytes(out, kOld);
  const auto before = test::entries(dir);
  std::string log;
  ASSERT_EQ(test::run_bonsai(stories_args(out) + " --max-memory 64M", &log), 1) << log;
  EXPECT_NE(log.find("of RAM at its peak"), std::string::npos) << log;
  EXPECT_NE(log.find("--max-memory is 64.0 MiB"), std::string::npos) << log;
  EXPECT_EQ(log.find("quantize blocks"), std::string::npos) << "blocks ran before the refusal: " << log;
  EXPECT_EQ(test::entries(dir), before);
  EXPECT_TRUE(test::read_bytes(out) == kOld);
  // A size that is not one is a usage error naming the option.
  ASSERT_EQ(test::run_bonsai(stories_args(out) + " --max-memory lots", &log), 2) << log;
  EXPECT_NE(log.find("--max-memory: 'lots' is not a size"), std::string::npos) << log;
  // Enough memory: the job says what it needs, then runs.
  ASSERT_EQ(test::run_bonsai(stories_args(out) + " --max-memory 8G", &log), 0) << log;
  EXPECT_NE(log.find("of RAM at the peak (limit 8.00 GiB: --max-memory)"), std::string::npos) << log;
}
