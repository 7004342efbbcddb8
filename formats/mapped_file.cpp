#include "formats/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>

#include "formats/error.h"

namespace bonsai {
namespace {

// The live maps, start -> size: what release() may hand back.
std::mutex live_mutex;
std::map<const uint8_t*, uint64_t> live;

}  // namespace

std::shared_ptr<const MappedFile> MappedFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, "cannot open: ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    fail(path, "cannot stat: ", std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(path, "not a regular file");
  }
  std::shared_ptr<MappedFile> m(new MappedFile());
  m->path_ = path;
  m->size_ = uint64_t(st.st_size);
  if (m->size_ > 0) {
    void* p = ::mmap(nullptr, m->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int e = errno;
      ::close(fd);
      fail(path, "cannot map: ", std::strerror(e));
    }
    m->data_ = static_cast<const uint8_t*>(p);
    const std::lock_guard<std::mutex> lock(live_mutex);
    live[m->data_] = m->size_;
  }
  ::close(fd);
  return m;
}

MappedFile::~MappedFile() {
  if (!data_) return;
  {
    const std::lock_guard<std::mutex> lock(live_mutex);
    live.erase(data_);
  }
  ::munmap(const_cast<uint8_t*>(data_), size_);
}

bool MappedFile::release(const void* p, uint64_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  const std::lock_guard<std::mutex> lock(live_mutex);
  auto it = live.upper_bound(b);  // the first map starting after b; the one before may hold it
  if (it == live.begin()) return false;
  --it;
  if (b + n > it->first + it->second) return false;
  const auto page = uint64_t(::sysconf(_SC_PAGESIZE));
  const uint64_t from = (uint64_t(b - it->first) + page - 1) / page * page;
  const uint64_t to = uint64_t(b + n - it->first) / page * page;
  if (to > from) ::madvise(const_cast<uint8_t*>(it->first) + from, to - from, MADV_DONTNEED);
  return true;
}

}  // namespace bonsai
