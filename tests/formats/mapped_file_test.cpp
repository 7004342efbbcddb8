// MappedFile: the read-only map every reader takes its bytes from, and release(), which hands a
// range's pages back to the kernel (the CPU backend does it for weights it keeps regrouped).
#include "formats/mapped_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "formats/error.h"
#include "support.h"

namespace bonsai {
namespace {

TEST(MappedFile, MapsTheWholeFileAndRefusesMissingOnes) {
  const auto path = test::scratch_dir() / "bytes.bin";
  std::vector<uint8_t> bytes(3 * size_t(::sysconf(_SC_PAGESIZE)) + 100);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = uint8_t(i * 7 + i / 251);
  test::write_bytes(path, bytes);
  const auto m = MappedFile::open(path.string());
  ASSERT_EQ(m->size(), bytes.size());
  EXPECT_EQ(0, std::memcmp(m->data(), bytes.data(), bytes.size()));
  EXPECT_THROW(MappedFile::open((path.parent_path() / "missing.bin").string()), Error);
}

// Released pages come back with the file's bytes when read again; memory that is not a live map
// (the heap, a range running past the map's end, a map already closed) is refused untouched.
TEST(MappedFile, ReleasedPagesReadBackTheFileAndOtherMemoryIsRefused) {
  const auto path = test::scratch_dir() / "release.bin";
  const size_t page = size_t(::sysconf(_SC_PAGESIZE));
  std::vector<uint8_t> bytes(4 * page + 100);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = uint8_t(i * 13 + i / 241);
  test::write_bytes(path, bytes);
  const uint8_t* old = nullptr;
  {
    const auto m = MappedFile::open(path.string());
    old = m->data();
    EXPECT_EQ(0, std::memcmp(m->data(), bytes.data(), bytes.size()));  // every page resident
    EXPECT_TRUE(MappedFile::release(m->data() + 100, bytes.size() - 200));
    EXPECT_TRUE(MappedFile::release(m->data(), bytes.size()));
    EXPECT_EQ(0, std::memcmp(m->data(), bytes.data(), bytes.size()));
    EXPECT_FALSE(MappedFile::release(m->data() + 100, bytes.size()));  // past the end
    EXPECT_FALSE(MappedFile::release(bytes.data(), bytes.size()));     // the heap
    EXPECT_EQ(bytes[page + 5], uint8_t((page + 5) * 13 + (page + 5) / 241));
  }
  EXPECT_FALSE(MappedFile::release(old, 10));  // unmapped with its MappedFile
}

}  // namespace
}  // namespace bonsai
