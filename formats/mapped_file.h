// Read-only memory map of a whole file. Readers take their bytes from here and bound every
// access by size(): nothing is read past the map and nothing is allocated before it is checked.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace bonsai {

class MappedFile {
 public:
  // Throws Error("path: ...") when the file cannot be opened or mapped.
  static std::shared_ptr<const MappedFile> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  // Gives back the memory of the whole pages inside [p, p + n) when that range lies in a live
  // MappedFile: they leave the process's resident set and are read again from the file if touched
  // (the map is private and never written, so nothing is lost). False, and nothing done, for any
  // other memory. For a reader that keeps its own copy of those bytes (the CPU backend's regrouped
  // weights), so that the file's pages do not count a second time.
  static bool release(const void* p, uint64_t n);

  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  std::string path_;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace bonsai
