#include "datasets/source_file.h"

#include <zlib.h>

#include <algorithm>
#include <system_error>

#include "formats/error.h"
#include "formats/mapped_file.h"

namespace bonsai::datasets {

std::string read_source_file(const std::string& path, uint64_t max_bytes) {
  const auto f = MappedFile::open(path);
  if (!path.ends_with(".gz")) {
    if (f->size() > max_bytes) fail(path, "file of ", f->size(), " bytes is larger than the limit of ", max_bytes);
    return std::string(reinterpret_cast<const char*>(f->data()), f->size());
  }
  z_stream z{};
  // 16 + MAX_WBITS: a gzip header and trailer (CRC checked) around the deflate stream.
  if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) fail(path, "cannot start gzip decompression");
  std::string out;
  const uint8_t* in = f->data();
  uint64_t in_left = f->size();
  char buf[1 << 16];
  int rc = Z_OK;
  do {
    if (z.avail_in == 0) {
      const uInt take = uInt(std::min<uint64_t>(in_left, 1u << 30));
      z.next_in = const_cast<Bytef*>(in);
      z.avail_in = take;
      in += take;
      in_left -= take;
    }
    z.next_out = reinterpret_cast<Bytef*>(buf);
    z.avail_out = sizeof buf;
    rc = inflate(&z, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END) {
      const std::string msg = rc == Z_BUF_ERROR ? "it ends early (truncated file)" : z.msg ? z.msg : "data error";
      inflateEnd(&z);
      fail(path, "not valid gzip data: ", msg);
    }
    out.append(buf, sizeof buf - z.avail_out);
    if (out.size() > max_bytes) {
      inflateEnd(&z);
      fail(path, "decompresses to more than ", max_bytes, " bytes");
    }
    if (rc != Z_STREAM_END && z.avail_in == 0 && in_left == 0 && z.avail_out != 0) {
      inflateEnd(&z);
      fail(path, "gzip data ends early (truncated file)");
    }
  } while (rc != Z_STREAM_END);
  inflateEnd(&z);
  return out;
}

std::vector<std::string> list_files(const std::filesystem::path& dir, const std::string& suffix, bool recursive) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) fail(dir.string(), "folder not found (is the package unpacked?)");
  std::vector<std::string> files;
  auto consider = [&](const fs::directory_entry& e) {
    const std::string name = e.path().filename().string();
    if (name.starts_with(".") || !name.ends_with(suffix)) return;
    if (e.is_symlink(ec) || !e.is_regular_file(ec)) return;
    files.push_back(e.path().string());
  };
  if (recursive) {
    fs::recursive_directory_iterator it(dir, ec), end;
    if (ec) fail(dir.string(), "cannot list: ", ec.message());
    for (; it != end; it.increment(ec)) {
      if (ec) fail(dir.string(), "cannot list: ", ec.message());
      if (it->path().filename().string().starts_with(".") && it->is_directory(ec)) {
        it.disable_recursion_pending();
        continue;
      }
      consider(*it);
    }
  } else {
    fs::directory_iterator it(dir, ec), end;
    if (ec) fail(dir.string(), "cannot list: ", ec.message());
    for (; it != end; it.increment(ec)) {
      if (ec) fail(dir.string(), "cannot list: ", ec.message());
      consider(*it);
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace bonsai::datasets
