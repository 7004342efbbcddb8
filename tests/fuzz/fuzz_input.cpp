#include "fuzz/fuzz_input.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "formats/tensor_set.h"
#include "formats/types.h"

namespace bonsai::fuzz {
namespace fs = std::filesystem;

namespace {

struct Scratch {
  std::string dir;
  Scratch() {
    const fs::path base = fs::is_directory("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
    dir = (base / ("bonsai-fuzz-" + std::to_string(::getpid()))).string();
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "fuzz finding: %s\n", what.c_str());
  std::abort();
}

}  // namespace

const std::string& scratch() {
  static Scratch s;
  return s.dir;
}

std::string input_file(const uint8_t* data, size_t size, const std::string& name) {
  const std::string path = scratch() + "/" + name;
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(data), std::streamsize(size));
  f.close();
  if (!f) finding("cannot write the input to " + path);
  return path;
}

void touch_tensors(const TensorSet& ts) {
  volatile uint8_t sink = 0;
  for (const Tensor& t : ts.tensors) {
    if (t.ne.size() > 4) finding("tensor '" + t.name + "' has " + std::to_string(t.ne.size()) + " dimensions");
    for (int64_t n : t.ne)
      if (n < 0) finding("tensor '" + t.name + "' has a dimension of " + std::to_string(n));
    // The size again, in 128 bits and without tensor_bytes(): a reader that trusts a wrapped
    // 64-bit size (and the readers all use tensor_bytes) would agree with itself otherwise.
    const TypeTraits& tt = traits(t.type);
    unsigned __int128 elems = 1;
    for (int64_t n : t.ne) {
      elems *= uint64_t(n);
      if (elems >> 64) finding("tensor '" + t.name + "' has more than 2^64 elements");
    }
    const unsigned __int128 need = elems / uint64_t(tt.block_elems) * uint64_t(tt.block_bytes);
    if (t.ne.empty() || elems % uint64_t(tt.block_elems) != 0 || need != t.nbytes)
      finding("tensor '" + t.name + "' holds " + std::to_string(t.nbytes) + " bytes, not what its type and shape need");
    if (t.nbytes > 0 && !t.data) finding("tensor '" + t.name + "' has no data");
    for (uint64_t i = 0; i < t.nbytes; ++i) sink = sink + t.data[i];
  }
  (void)sink;
}

void check_error_names_file(const Error& e, const std::string& file) {
  if (file.empty()) return;
  const std::string what = e.what();
  if (what.find(file) == std::string::npos) finding("error does not name " + file + ": " + what);
}

}  // namespace bonsai::fuzz
