#include "formats/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include "formats/error.h"
#include "formats/kill_point.h"

namespace bonsai {

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  std::vector<char> tmpl(path_.begin(), path_.end());
  const char suffix[] = ".tmp.XXXXXX";
  tmpl.insert(tmpl.end(), suffix, suffix + sizeof suffix);  // includes the NUL
  fd_ = ::mkstemp(tmpl.data());
  if (fd_ < 0) fail(path_, "cannot create output: ", std::strerror(errno));
  tmp_ = tmpl.data();
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_.c_str());
  }
}

void AtomicFile::write(const void* data, uint64_t n) {
  if (kill_points_armed()) kill_point("write:" + std::filesystem::path(path_).filename().string());
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, n > (1u << 30) ? (1u << 30) : size_t(n));
    if (w < 0) {
      if (errno == EINTR) continue;
      fail(path_, "write failed: ", std::strerror(errno));
    }
    p += w;
    n -= uint64_t(w);
    offset_ += uint64_t(w);
  }
}

void AtomicFile::write_at(uint64_t at, const void* data, uint64_t n) {
  if (at > offset_ || n > offset_ - at)
    fail(path_, "cannot rewrite bytes [", at, ", +", n, ") of the ", offset_, " written so far");
  if (kill_points_armed()) kill_point("write:" + std::filesystem::path(path_).filename().string());
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    const ssize_t w = ::pwrite(fd_, p, n > (1u << 30) ? (1u << 30) : size_t(n), off_t(at));
    if (w < 0) {
      if (errno == EINTR) continue;
      fail(path_, "write failed: ", std::strerror(errno));
    }
    p += w;
    n -= uint64_t(w);
    at += uint64_t(w);
  }
}

void AtomicFile::pad_to(uint64_t alignment) {
  static const uint8_t zeros[256] = {};
  while (offset_ % alignment) {
    const uint64_t k = alignment - offset_ % alignment;
    write(zeros, k < sizeof zeros ? k : sizeof zeros);
  }
}

void AtomicFile::commit() {
  if (::fsync(fd_) != 0) fail(path_, "fsync failed: ", std::strerror(errno));
  // mkstemp makes 0600; outputs are ordinary files.
  const mode_t um = ::umask(0);
  ::umask(um);
  ::fchmod(fd_, 0666 & ~um);
  if (::close(fd_) != 0) {
    fd_ = -1;
    ::unlink(tmp_.c_str());
    fail(path_, "close failed: ", std::strerror(errno));
  }
  fd_ = -1;
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp_.c_str());
    fail(path_, "cannot rename the finished output into place: ", std::strerror(e));
  }
  // The rename is an entry of the folder: without this it may not survive a power cut even though
  // the bytes did. Best effort (some filesystems refuse fsync on a folder), the file is in place.
  const std::filesystem::path parent = std::filesystem::path(path_).parent_path();
  const std::filesystem::path dir = parent.empty() ? std::filesystem::path(".") : parent;
  if (const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

namespace {

std::string folder_of(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

std::string gib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", double(bytes) / double(uint64_t(1) << 30));
  return buf;
}

}  // namespace

uint64_t available_bytes(const std::string& path) {
  const std::string dir = folder_of(path);
  struct statvfs st{};
  if (::statvfs(dir.c_str(), &st) != 0)
    fail(path, "cannot find the free space of its folder ", dir, ": ", std::strerror(errno));
  return uint64_t(st.f_bavail) * uint64_t(st.f_frsize);
}

void require_space(const std::string& path, uint64_t need, uint64_t available) {
  if (available >= need) return;
  fail(path, "needs ", need, " bytes (", gib(need), ") but its filesystem (", folder_of(path), ") has ", available,
       " bytes (", gib(available), ") free; nothing was written");
}

int remove_stale_temps(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  const std::string prefix = p.filename().string() + ".tmp.";
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  std::error_code ec;
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() == prefix.size() + 6 && name.starts_with(prefix) && e.is_regular_file(ec) &&
        fs::remove(e.path(), ec))
      ++n;
  }
  return n;
}

}  // namespace bonsai
