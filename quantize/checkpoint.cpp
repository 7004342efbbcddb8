#include "quantize/checkpoint.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "formats/atomic_file.h"
#include "formats/error.h"
#include "formats/gguf.h"
#include "formats/kill_point.h"
#include "formats/mapped_file.h"

namespace bonsai::quant {

namespace fs = std::filesystem;

namespace {

constexpr const char* kFormat = "bonsai quantize checkpoint";
constexpr int kVersion = 1;
constexpr const char* kErrorsKey = "bonsai.job.errors";
constexpr const char* kBlockKey = "bonsai.job.block";

std::string numbered(const char* prefix, int64_t l, const char* ext) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s-%03lld%s", prefix, (long long)l, ext);
  return buf;
}

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", (unsigned long long)v);
  return buf;
}

// The names bonsai writes in a checkpoint folder, with or without AtomicFile's ".tmp.XXXXXX":
// only these are ever removed, so a folder the user filled by mistake loses nothing of theirs.
bool ours(std::string name) {
  if (const size_t t = name.rfind(".tmp."); t != std::string::npos && t + 11 == name.size()) name.resize(t);
  if (name == "state.json" || name == "lock" || name == "outer.gguf") return true;
  for (const char* p : {"block-", "stats-", "hidden-", "spill-"})
    if (name.starts_with(p) && (name.ends_with(".gguf") || name.ends_with(".f32")) && name.find('/') == std::string::npos)
      return true;
  return false;
}

// Read in pieces rather than mapped: a gigabyte of hidden states, mapped whole, would count in the
// process's peak RSS for the instant of the checksum.
uint64_t file_xxh3(const std::string& path, uint64_t* size) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, "cannot open: ", std::strerror(errno));
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  std::vector<uint8_t> buf(size_t(1) << 20);
  *size = 0;
  for (;;) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      XXH3_freeState(st);
      ::close(fd);
      fail(path, "cannot read: ", std::strerror(e));
    }
    if (n == 0) break;
    XXH3_64bits_update(st, buf.data(), size_t(n));
    *size += uint64_t(n);
  }
  const uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  ::close(fd);
  return h;
}

}  // namespace

std::string job_differences(const nlohmann::ordered_json& now, const nlohmann::ordered_json& saved) {
  std::string out;
  auto note = [&](const std::string& key, const nlohmann::ordered_json* a, const nlohmann::ordered_json* b) {
    if (!out.empty()) out += "; ";
    const std::string sa = a ? a->dump() : "absent", sb = b ? b->dump() : "absent";
    // Long values (the resolved plan, file lists) are named, not printed.
    if (sa.size() + sb.size() <= 120) out += key + ": " + sa + " here, " + sb + " in the checkpoint";
    else out += key + " differs";
  };
  for (const auto& [k, v] : now.items()) {
    const auto it = saved.find(k);
    if (it == saved.end()) note(k, &v, nullptr);
    else if (*it != v) note(k, &v, &*it);
  }
  for (const auto& [k, v] : saved.items())
    if (!now.contains(k)) note(k, nullptr, &v);
  return out;
}

JobCheckpoint::JobCheckpoint(const std::string& output, PartialMode mode)
    : dir_(output + ".partial"), state_path_((fs::path(dir_) / "state.json").string()) {
  std::error_code ec;
  const bool existed = fs::exists(dir_, ec);
  if (existed && !fs::is_directory(dir_, ec))
    fail(dir_, "is in the way of ", output, "'s checkpoint folder (it is not a folder): move it away");
  if (!existed && !fs::create_directory(dir_, ec))
    fail(output, "cannot create its checkpoint folder ", dir_, ": ", ec.message());
  const std::string lock = file("lock");
  lock_fd_ = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd_ < 0) {
    const int e = errno;
    if (!existed) fs::remove(dir_, ec);
    fail(output, "cannot write in its checkpoint folder ", dir_, ": ", std::strerror(e));
  }
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0)
    fail(dir_, "another bonsai quantize is writing ", output, " now (this folder is locked): wait for it or stop it");
  if (!existed || !fs::exists(state_path_, ec)) return;  // nothing finished here yet
  if (mode == PartialMode::fresh)
    fail(output, "an interrupted job left its finished blocks in ", dir_,
         ": rerun with --resume to continue it, or with --restart to discard them and start over");
  if (mode == PartialMode::restart) {
    clear();
    return;
  }
  try {
    const auto map = MappedFile::open(state_path_);
    const nlohmann::ordered_json st = nlohmann::ordered_json::parse(map->data(), map->data() + map->size());
    if (st.value("format", "") != kFormat || st.value("version", 0) != kVersion)
      fail(state_path_, "is not a version ", kVersion, " ", kFormat, ": --restart discards it");
    job_ = st.at("job");
    blocks_done_ = st.at("blocks_done").get<int64_t>();
    files_ = st.at("files");
    if (!job_.is_object() || !files_.is_object() || blocks_done_ < 0)
      fail(state_path_, "holds a malformed job, file list or block count: --restart discards it");
    for (const auto& [name, f] : files_.items())
      if (!ours(name) || !f.at("bytes").is_number_unsigned() || !f.at("xxh3").is_string())
        fail(state_path_, "lists a file '", name, "' that is no checkpoint file: --restart discards it");
  } catch (const nlohmann::json::exception& e) {
    fail(state_path_, "is not a checkpoint state (", e.what(), "): --restart discards it");
  }
  saved_ = true;
}

JobCheckpoint::~JobCheckpoint() {
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the flock
}

std::string JobCheckpoint::file(const std::string& name) const { return (fs::path(dir_) / name).string(); }

int64_t JobCheckpoint::begin(const nlohmann::ordered_json& job, const std::string& output) {
  if (saved_) {
    if (const std::string d = job_differences(job, job_); !d.empty())
      fail(state_path_, "belongs to a job with other inputs or options (", d,
           "): rerun with the same ones to resume it, or with --restart to discard it and start over");
    for (const auto& [name, f] : files_.items()) {
      const std::string path = file(name);
      std::error_code ec;
      if (!fs::is_regular_file(path, ec)) fail(path, "is missing from the checkpoint: --restart starts over");
      uint64_t size = 0;
      const uint64_t h = file_xxh3(path, &size);
      if (size != f["bytes"].get<uint64_t>() || hex64(h) != f["xxh3"].get<std::string>())
        fail(path, "does not match the size and XXH3 checksum state.json records (", size, " bytes, ", hex64(h), "; recorded ",
             f["bytes"].get<uint64_t>(), " bytes, ", f["xxh3"].get<std::string>(),
             "): the checkpoint is damaged; --restart starts over");
    }
  } else {
    job_ = job;
    blocks_done_ = 0;
    files_ = nlohmann::ordered_json::object();
  }
  // Files a killed job wrote but never recorded (a block between its file and the state), and
  // AtomicFile temporaries: only complete, recorded work is trusted.
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    const std::string name = e.path().filename().string();
    if (name != "state.json" && name != "lock" && ours(name) && !files_.contains(name)) fs::remove(e.path(), ec);
  }
  remove_stale_temps(output);  // a final write that was killed (we hold the lock: no live writer)
  if (!saved_) write_state();
  saved_ = begun_ = true;
  return blocks_done_;
}

void JobCheckpoint::write_state() {
  nlohmann::ordered_json st;
  st["format"] = kFormat;
  st["version"] = kVersion;
  st["job"] = job_;
  st["blocks_done"] = blocks_done_;
  st["files"] = files_;
  const std::string text = st.dump(1) + "\n";
  AtomicFile f(state_path_);
  f.write(text.data(), text.size());
  f.commit();
}

void JobCheckpoint::record(const std::string& name) {
  uint64_t size = 0;
  const uint64_t h = file_xxh3(file(name), &size);
  files_[name] = {{"bytes", size}, {"xxh3", hex64(h)}};
}

void JobCheckpoint::save_block(int64_t l, const BlockCheckpoint& b) {
  if (l != blocks_done_) fail(dir_, "block ", l, " finished while ", blocks_done_, " blocks are recorded");
  Metadata meta;
  meta.set_u32(kBlockKey, uint32_t(l));
  meta.set_str(kErrorsKey, b.errors.dump());
  const std::string block = numbered("block", l, ".gguf");
  write_gguf(file(block), meta, b.tensors);
  record(block);
  if (b.stats) {
    const std::string name = numbered("stats", l, ".gguf");
    calib::save_stats(file(name), *b.stats);
    record(name);
  }
  // Only the latest hidden states are needed; the previous file goes once the state no longer names it.
  std::vector<std::string> stale;
  for (const auto& [name, f] : files_.items())
    if (name.starts_with("hidden-")) stale.push_back(name);
  for (const auto& name : stale) files_.erase(name);
  if (!b.hidden.empty()) {
    const std::string name = numbered("hidden", l, ".f32");
    AtomicFile f(file(name));
    f.write(b.hidden.data(), b.hidden.size() * sizeof(float));
    f.commit();
    record(name);
  }
  blocks_done_ = l + 1;
  write_state();
  std::error_code ec;
  for (const auto& name : stale) fs::remove(file(name), ec);
  kill_point("block");
}

TensorSet JobCheckpoint::load_block(int64_t l, nlohmann::ordered_json* errors) const {
  const std::string path = file(numbered("block", l, ".gguf"));
  if (l >= blocks_done_) fail(path, "block ", l, " is not finished (", blocks_done_, " are)");
  TensorSet ts = read_gguf(path);
  if (ts.meta.get_int(kBlockKey) != l) fail(path, kBlockKey, " is not ", l);
  try {
    *errors = nlohmann::ordered_json::parse(ts.meta.get_str(kErrorsKey).value_or(""));
  } catch (const nlohmann::json::exception& e) {
    fail(path, kErrorsKey, " is not JSON: ", e.what());
  }
  return ts;
}

std::string JobCheckpoint::stats_file(int64_t l) const {
  const std::string name = numbered("stats", l, ".gguf");
  if (!files_.contains(name)) fail(file(name), "is not in the checkpoint (the job kept no statistics for block ", l, ")");
  return file(name);
}

void JobCheckpoint::load_hidden(int64_t l, float* dst, uint64_t count) const {
  const std::string name = numbered("hidden", l, ".f32");
  if (!files_.contains(name)) fail(file(name), "is not in the checkpoint (no hidden states after block ", l, ")");
  const auto map = MappedFile::open(file(name));
  if (map->size() != count * sizeof(float))
    fail(file(name), "holds ", map->size(), " bytes, the calibration needs ", count, " floats");
  std::memcpy(dst, map->data(), map->size());
}

void JobCheckpoint::save_outer(std::span<const Tensor> tensors) {
  write_gguf(file("outer.gguf"), Metadata{}, tensors);
  record("outer.gguf");
  write_state();
}

std::optional<TensorSet> JobCheckpoint::load_outer() const {
  if (!files_.contains("outer.gguf")) return std::nullopt;
  return read_gguf(file("outer.gguf"));
}

void JobCheckpoint::clear() {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    const std::string name = e.path().filename().string();
    if (name != "lock" && ours(name)) fs::remove(e.path(), ec);
  }
  files_ = nlohmann::ordered_json::object();
  blocks_done_ = 0;
  saved_ = false;
}

void JobCheckpoint::finish() {
  clear();
  std::error_code ec;
  fs::remove(file("lock"), ec);
  fs::remove(dir_, ec);  // fails, leaving it, only when it holds files bonsai did not write
}

bool JobCheckpoint::abandon() {
  // Before begin() the folder is either new (ours: remove it) or another run's resumable work
  // that this one refused (leave it exactly as it is).
  if (!begun_) {
    if (!saved_) finish();
    return false;
  }
  if (blocks_done_ > 0) return true;
  finish();
  return false;
}

}  // namespace bonsai::quant
