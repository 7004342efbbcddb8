#include "formats/stream_writer.h"

#include <algorithm>

#include "formats/error.h"
#include "formats/mapped_file.h"

namespace bonsai {

StreamWriter::StreamWriter(std::string path, std::span<const Tensor> table) : path_(std::move(path)) {
  table_.reserve(table.size());
  for (const Tensor& t : table) {
    Tensor e;
    e.name = t.name;
    e.type = t.type;
    e.ne = t.ne;
    e.nbytes = t.nbytes;
    table_.push_back(std::move(e));
  }
}

StreamWriter::~StreamWriter() = default;

void StreamWriter::set_layout(std::vector<uint8_t> head, std::vector<uint64_t> offsets, uint64_t file_bytes) {
  head_ = std::move(head);
  offsets_ = std::move(offsets);
  file_bytes_ = file_bytes;
  advance();
}

void StreamWriter::open() {
  if (file_) return;
  file_ = std::make_unique<AtomicFile>(path_);
  file_->write(head_.data(), head_.size());
}

// The layout was computed by the format from the same table: a gap that would have to be negative
// is a bug in it, caught here rather than written.
void StreamWriter::zeros_to(uint64_t offset) {
  if (file_->offset() > offset)
    fail(path_, "layout error: at byte ", file_->offset(), " of the file, past ", offset, " where the next part starts");
  static const uint8_t zeros[4096] = {};
  while (file_->offset() < offset) file_->write(zeros, std::min<uint64_t>(sizeof zeros, offset - file_->offset()));
}

void StreamWriter::advance() {
  while (cur_ < table_.size() && cur_done_ == table_[cur_].nbytes) {
    on_tensor_done(cur_);
    ++cur_;
    cur_done_ = 0;
  }
}

void StreamWriter::write(const void* data, uint64_t n) {
  if (n == 0) return;
  if (cur_ == table_.size())
    fail(path_, n, " bytes more than the ", table_.size(), " tensors of the table hold (all are written)");
  const Tensor& t = table_[cur_];
  if (n > t.nbytes - cur_done_)
    fail(path_, "tensor '", t.name, "' is given ", cur_done_ + n, " bytes, its table entry holds ", t.nbytes);
  open();
  if (cur_done_ == 0) zeros_to(offsets_[cur_]);
  const auto* p = static_cast<const uint8_t*>(data);
  file_->write(p, n);
  on_bytes(cur_, p, n);
  cur_done_ += n;
  advance();
}

void StreamWriter::write_rows(size_t i, const RowFill& fill, uint64_t max_chunk_bytes) {
  if (i >= table_.size()) fail(path_, "no tensor ", i, " in a table of ", table_.size());
  const Tensor& t = table_[i];
  if (t.nbytes == 0 && i < cur_) return;  // complete from the start: nothing to write
  if (i != cur_ || cur_done_ != 0)
    fail(path_, "tensor '", t.name, "' is written out of order: the next bytes belong to ",
         cur_ == table_.size() ? std::string("no tensor (all are written)") : cat("'", table_[cur_].name, "'"),
         cur_done_ != 0 ? cat(", ", cur_done_, " bytes into it") : std::string());
  const int64_t rows = t.rows();
  const uint64_t rb = t.nbytes / uint64_t(rows);
  const int64_t chunk = std::clamp<int64_t>(int64_t(max_chunk_bytes / rb), 1, rows);
  std::vector<uint8_t> buf(size_t(uint64_t(chunk) * rb));
  for (int64_t r = 0; r < rows; r += chunk) {
    const int64_t n = std::min(chunk, rows - r);
    fill(r, n, buf.data());
    write(buf.data(), uint64_t(n) * rb);
  }
}

void StreamWriter::rewrite_head() { file_->write_at(0, head_.data(), head_.size()); }

void StreamWriter::commit() {
  if (cur_ < table_.size())
    fail(path_, "tensor '", table_[cur_].name, "' is incomplete (", cur_done_, " of its ", table_[cur_].nbytes,
         " bytes written): the file is not finished");
  open();
  zeros_to(file_bytes_);
  finish();
  file_->commit();
}

void write_tensors(StreamWriter& w, std::span<const Tensor> tensors) {
  for (const Tensor& t : tensors)
    if (t.nbytes > 0 && !t.data) fail(w.path(), "tensor '", t.name, "' has no data");
  for (const Tensor& t : tensors) {
    w.write(t.data, t.nbytes);
    // Streamed from a map (a quantize job's checkpoint files): its pages need not stay resident.
    MappedFile::release(t.data, t.nbytes);
  }
  w.commit();
}

}  // namespace bonsai
