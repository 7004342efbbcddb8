// A large float buffer that lives in anonymous memory, or, when RAM is short, in a file-backed
// shared map (a spill): the kernel then writes its pages back to the file and evicts them under
// memory pressure instead of the OOM killer ending the process. The file is created beside the
// job's output, its space reserved up front (a full disk is an Error now, not a SIGBUS later), and
// unlinked at once, so nothing is left behind whatever ends the process.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace bonsai {

class SpillBuffer {
 public:
  SpillBuffer() = default;
  // n floats, zeroed: in RAM, or spilled to a new file at `spill_path` (Error naming it when it
  // cannot be created or its space reserved).
  static SpillBuffer in_ram(size_t n);
  static SpillBuffer spilled(size_t n, const std::string& spill_path);
  ~SpillBuffer();
  SpillBuffer(SpillBuffer&& o) noexcept;
  SpillBuffer& operator=(SpillBuffer&& o) noexcept;
  SpillBuffer(const SpillBuffer&) = delete;
  SpillBuffer& operator=(const SpillBuffer&) = delete;

  float* data() { return data_; }
  const float* data() const { return data_; }
  size_t size() const { return n_; }
  bool is_spilled() const { return spilled_; }

 private:
  void release();
  float* data_ = nullptr;
  size_t n_ = 0;
  bool spilled_ = false;
};

}  // namespace bonsai
