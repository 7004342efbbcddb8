#include "support.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <stdexcept>

#include "formats/error.h"

namespace bonsai::test {

std::filesystem::path shared_dir() {
  if (const char* e = std::getenv("BONSAI_SHARED_DIR"); e && *e) return e;
  return BONSAI_DEFAULT_SHARED_DIR;
}

std::filesystem::path shared_file(const std::string& rel) { return shared_dir() / rel; }

bool have_shared(const std::string& rel) { return std::filesystem::exists(shared_file(rel)); }

std::filesystem::path scratch_dir() {
  static int counter = 0;
  auto base = std::filesystem::temp_directory_path() /
              ("bonsai-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
  std::filesystem::remove_all(base);
  std::filesystem::create_directories(base);
  static std::vector<std::filesystem::path> made;
  made.push_back(base);
  static struct Cleanup {
    ~Cleanup() {
      std::error_code ec;
      for (auto& p : made) std::filesystem::remove_all(p, ec);
    }
  } cleanup;
  return base;
}

std::vector<uint8_t> read_bytes(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read " + p.string());
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::filesystem::path& p, const std::vector<uint8_t>& bytes) {
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  if (!f) throw std::runtime_error("cannot write " + p.string());
}

int run_bonsai(const std::string& args, std::string* out) { return run_shell(std::string(BONSAI_BINARY) + " " + args, out); }

int run_shell(const std::string& command, std::string* out) {
  const std::string cmd = command + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return -1;
  std::array<char, 4096> buf{};
  out->clear();
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out->append(buf.data(), n);
  const int st = ::pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int run_bonsai(const std::string& args, std::string* out, const std::function<void()>& in_child) {
  const std::string cmd = std::string(BONSAI_BINARY) + " " + args + " 2>&1";
  int fds[2];
  if (::pipe(fds) != 0) return -1;
  const pid_t pid = ::fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    ::close(fds[0]);
    ::dup2(fds[1], 1);
    ::close(fds[1]);
    if (in_child) in_child();
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(fds[1]);
  out->clear();
  std::array<char, 4096> buf{};
  ssize_t n;
  while ((n = ::read(fds[0], buf.data(), buf.size())) != 0) {
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    out->append(buf.data(), size_t(n));
  }
  ::close(fds[0]);
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : -1;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string expect_error(const std::function<void()>& f, const std::string& file) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no Error thrown (expected one naming " << file << ")";
  return "";
}

namespace {

// One damaged read: true when refused with an Error naming the file; a gtest failure when the
// Error does not name it. Any other exception escapes to gtest, which reports it.
bool refused(const std::string& path, const std::function<void(const std::string&)>& read,
             const std::string& damage) {
  try {
    read(path);
    return false;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << damage << ": " << e.what();
    return true;
  }
}

}  // namespace

Damage damage_file(const std::filesystem::path& path, const std::vector<uint8_t>& good, size_t flip_bytes,
                   size_t cut_below, const std::function<void(const std::string&)>& read, bool cuts_may_parse) {
  flip_bytes = std::min(flip_bytes, good.size());
  cut_below = std::min(cut_below, good.size());
  const std::string p = path.string();
  Damage d;
  write_bytes(path, good);
  const int fd = ::open(p.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("cannot open " + p);
  for (size_t i = 0; i < flip_bytes; ++i) {
    // One bit per byte, a different one from byte to byte: every field sees high and low bits
    // flipped, at an eighth of the reads of flipping them all.
    const int bit = int(i % 8);
    const uint8_t flipped = uint8_t(good[i] ^ (1u << bit));
    if (::pwrite(fd, &flipped, 1, off_t(i)) != 1) throw std::runtime_error("cannot patch " + p);
    ++d.flips;
    d.flips_refused += refused(p, read, "bit " + std::to_string(bit) + " of byte " + std::to_string(i) + " flipped");
    if (::pwrite(fd, &good[i], 1, off_t(i)) != 1) throw std::runtime_error("cannot patch " + p);
  }
  for (size_t n = cut_below; n-- > 0;) {
    if (::ftruncate(fd, off_t(n)) != 0) throw std::runtime_error("cannot truncate " + p);
    ++d.cuts;
    const bool r = refused(p, read, "cut to " + std::to_string(n) + " bytes");
    d.cuts_refused += r;
    if (!cuts_may_parse) {
      EXPECT_TRUE(r) << p << " cut to " << n << " bytes was read without an error";
    }
  }
  ::close(fd);
  return d;
}

std::vector<uint8_t> fuzz_seed(const std::string& target, const std::string& name) {
  return read_bytes(std::filesystem::path(BONSAI_FUZZ_CORPUS_DIR) / target / name);
}

}  // namespace bonsai::test
