// Writes a file so that a crash never leaves a half-written output under the final name: the
// bytes go to a temporary file beside it, are flushed to disk, and replace the final name by
// rename() only in commit(). Without commit() (an exception, a failed write) the temporary is
// removed and nothing that existed is touched. A process killed mid-write (SIGKILL, power cut)
// leaves only the temporary, `<path>.tmp.XXXXXX`, which remove_stale_temps() clears.
#pragma once
#include <cstdint>
#include <string>

namespace bonsai {

class AtomicFile {
 public:
  explicit AtomicFile(std::string path);  // Error when the folder is not writable
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, uint64_t n);  // Error naming the final path (e.g. disk full)
  void pad_to(uint64_t alignment);           // zero bytes up to a multiple of alignment
  // Rewrites n bytes already written at `at` (a table whose checksums follow the data it
  // describes); the end of the file stays where it is.
  void write_at(uint64_t at, const void* data, uint64_t n);
  uint64_t offset() const { return offset_; }
  void commit();                             // fsync + rename + fsync of the folder; Error on failure

 private:
  std::string path_, tmp_;
  int fd_ = -1;
  uint64_t offset_ = 0;
};

// The bytes an unprivileged writer may still put on the filesystem that would hold `path` (statvfs
// of its folder: f_bavail x f_frsize, less than root may use). Error naming path when the folder
// cannot be examined (it does not exist, ...).
uint64_t available_bytes(const std::string& path);
// Error naming `path`, the bytes it needs and those available when `available` < `need`: for a
// writer that knows its size before it creates anything, so that a file that cannot fit is
// refused at once instead of failing half written (bonsai synth: hours, tens of GB).
void require_space(const std::string& path, uint64_t need, uint64_t available);

// Removes the temporaries a killed writer of `path` left beside it (names `<path>.tmp.` + six
// mkstemp characters); returns how many. Only for a caller that knows no other process is writing
// `path` now (quantize holds its job's lock): a live writer's temporary would go too.
int remove_stale_temps(const std::string& path);

}  // namespace bonsai
