#include "formats/spill_buffer.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "formats/error.h"

namespace bonsai {

SpillBuffer SpillBuffer::in_ram(size_t n) {
  SpillBuffer b;
  b.n_ = n;
  if (n == 0) return b;
  // An anonymous map rather than new[]: it is zeroed by the kernel, page by page as touched, and
  // goes back to the system whole when freed.
  void* p = ::mmap(nullptr, n * sizeof(float), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw Error(cat("cannot allocate ", n * sizeof(float), " bytes: ", std::strerror(errno)));
  b.data_ = static_cast<float*>(p);
  return b;
}

SpillBuffer SpillBuffer::spilled(size_t n, const std::string& path) {
  SpillBuffer b;
  b.n_ = n;
  b.spilled_ = true;
  if (n == 0) return b;
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) fail(path, "cannot create the spill file: ", std::strerror(errno));
  ::unlink(path.c_str());  // the map keeps the file; a killed job leaves nothing
  const uint64_t bytes = uint64_t(n) * sizeof(float);
  if (const int e = ::posix_fallocate(fd, 0, off_t(bytes)); e != 0) {
    ::close(fd);
    fail(path, "cannot reserve ", bytes, " bytes for the spill file: ", std::strerror(e));
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int e = errno;
  ::close(fd);
  if (p == MAP_FAILED) fail(path, "cannot map the spill file: ", std::strerror(e));
  b.data_ = static_cast<float*>(p);
  return b;
}

void SpillBuffer::release() {
  if (data_) ::munmap(data_, n_ * sizeof(float));
  data_ = nullptr;
  n_ = 0;
}

SpillBuffer::~SpillBuffer() { release(); }

SpillBuffer::SpillBuffer(SpillBuffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), n_(std::exchange(o.n_, 0)), spilled_(o.spilled_) {}

SpillBuffer& SpillBuffer::operator=(SpillBuffer&& o) noexcept {
  if (this != &o) {
    release();
    data_ = std::exchange(o.data_, nullptr);
    n_ = std::exchange(o.n_, 0);
    spilled_ = o.spilled_;
  }
  return *this;
}

}  // namespace bonsai
