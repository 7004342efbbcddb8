// `bonsai synth` as a process: its memory stays near one chunk of rows for a model several times
// larger (the peak RSS the kernel measured for the child, wait4), it states the plan and the
// summary, it refuses an output whose real filesystem (a small tmpfs in a mount namespace of the
// child's own) cannot hold the file, and --config excludes --size.
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "support.h"

namespace {

namespace fs = std::filesystem;

struct Measured {
  int rc = -1;
  std::string out;             // stdout and stderr
  int64_t max_rss_bytes = 0;   // the child's peak resident set
};

// Runs the bonsai binary (no shell) and takes its peak RSS from wait4: that child's alone, not
// the maximum over every child this test binary has waited for (RUSAGE_CHILDREN).
Measured run_measured(const std::vector<std::string>& args) {
  Measured m;
  int fds[2];
  if (::pipe(fds) != 0) return m;
  std::vector<std::string> argv_s = {BONSAI_BINARY};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) return m;
  if (pid == 0) {
    ::close(fds[0]);
    ::dup2(fds[1], 1);
    ::dup2(fds[1], 2);
    ::close(fds[1]);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  std::array<char, 4096> buf{};
  ssize_t n;
  while ((n = ::read(fds[0], buf.data(), buf.size())) != 0) {
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    m.out.append(buf.data(), size_t(n));
  }
  ::close(fds[0]);
  int st = 0;
  rusage ru{};
  while (::wait4(pid, &st, 0, &ru) < 0)
    if (errno != EINTR) return m;
  m.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  m.max_rss_bytes = int64_t(ru.ru_maxrss) * 1024;  // Linux reports kilobytes
  return m;
}

}  // namespace

// A BF16 model of 360 MB (a 151936-token embedding of 1024, two layers) is made with the memory
// of one chunk: the RSS synth adds to the program's own (the same binary printing its help) stays
// under 64 MiB, where holding the model, as synth did before it streamed, adds the whole file.
TEST(SynthCli, MemoryStaysNearOneChunkForAModelSeveralTimesLarger) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer's shadow memory and quarantine of freed blocks are not synth's memory";
#endif
  const auto dir = bonsai::test::scratch_dir();
  const std::string cfg = (dir / "config.json").string(), out = (dir / "m.gguf").string();
  std::ofstream(cfg) << R"({"model_type": "qwen3", "hidden_size": 1024, "intermediate_size": 3072,
    "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 128,
    "vocab_size": 151936, "max_position_embeddings": 40960, "rms_norm_eps": 1e-06, "rope_theta": 1000000,
    "tie_word_embeddings": true})";
  const Measured base = run_measured({"synth", "--help"});
  ASSERT_EQ(base.rc, 0) << base.out;
  const Measured m = run_measured({"synth", "--config", cfg, "--type", "bf16", "--embd-type", "bf16", "-o", out, "-t", "2"});
  ASSERT_EQ(m.rc, 0) << m.out;
  const int64_t bound = int64_t(64) << 20;
  const auto size = int64_t(fs::file_size(out));
  ASSERT_GT(size, 5 * bound) << "the model must dwarf the bound for the measurement to mean anything";
  EXPECT_LT(m.max_rss_bytes - base.max_rss_bytes, bound)
      << "synth peak RSS " << m.max_rss_bytes << ", the binary's own " << base.max_rss_bytes << ", file " << size;
  // Before writing: the model, its size and the memory it needs; then progress with an ETA; then
  // the summary with the time and the peak RSS.
  EXPECT_NE(m.out.find("synth: qwen3 from " + cfg + ", 24 tensors: "), std::string::npos) << m.out;
  EXPECT_NE(m.out.find(" of memory for its buffers beyond the program's own (peak RSS "), std::string::npos) << m.out;
  EXPECT_NE(m.out.find(", ETA "), std::string::npos) << m.out;
  EXPECT_NE(m.out.find("wrote " + out), std::string::npos) << m.out;
  EXPECT_NE(m.out.find(" s, peak RSS "), std::string::npos) << m.out;
}

// A real filesystem too small for the file: a tmpfs mounted over the scratch folder in a mount
// namespace of the child's own (it goes with the child; needs root, as CI has: skipped without).
// Refused before anything is created there, naming the output; a tmpfs with room takes it.
TEST(SynthCli, RefusesAnOutputItsFilesystemCannotHold) {
  const auto dir = bonsai::test::scratch_dir();
  const std::string out = (dir / "tiny.gguf").string();
  auto in_tmpfs = [&](const char* size) {
    std::string log;
    const int rc = bonsai::test::run_bonsai(
        "synth --size tiny -o '" + out + "' 2>&1; echo \"rc=$?\"; ls -A '" + dir.string() + "'", &log, [&] {
          const std::string opts = std::string("size=") + size;
          if (::unshare(CLONE_NEWNS) != 0 || ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
              ::mount("tmpfs", dir.c_str(), "tmpfs", 0, opts.c_str()) != 0)
            ::_exit(77);
        });
    return std::make_pair(rc, log);
  };
  const auto [rc, log] = in_tmpfs("16m");
  if (rc == 77) GTEST_SKIP() << "cannot mount a tmpfs in a mount namespace here (not root?)";
  EXPECT_NE(log.find("rc=1\n"), std::string::npos) << log;
  EXPECT_NE(log.find(out + ": needs 41678912 bytes"), std::string::npos) << log;
  EXPECT_NE(log.find("has 16777216 bytes (0.02 GiB) free"), std::string::npos) << log;
  EXPECT_TRUE(log.ends_with("rc=1\n")) << "the tmpfs should be empty: " << log;
  const auto [rc2, log2] = in_tmpfs("48m");
  EXPECT_NE(log2.find("rc=0\ntiny.gguf\n"), std::string::npos) << log2;
  EXPECT_TRUE(fs::is_empty(dir)) << "the tmpfs went with the child";
}

TEST(SynthCli, ConfigExcludesSize) {
  std::string out;
  EXPECT_EQ(bonsai::test::run_bonsai("synth --config x.json --size 4b -o x.gguf", &out), 2) << out;
  EXPECT_NE(out.find("--size cannot be given with --config"), std::string::npos) << out;
}
