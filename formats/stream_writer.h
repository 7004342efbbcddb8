// A model file written tensor by tensor, so that a writer holds one piece of one tensor instead of
// the model (bonsai synth makes 30 GB files on a 24 GB machine). A format's writer (GgufWriter in
// gguf.h, BonsaiWriter in bonsai_file.h) checks the metadata and the tensor table (names, types,
// shapes; no data) and lays the whole file out before anything is created, so the finished size
// is known up front and a bad input leaves nothing. The tensors' bytes then come in table order,
// through write() or write_rows(); each tensor starts at the offset its table entry gives (zeros
// pad up to it). The bytes go through AtomicFile: nothing appears under the final name before
// commit(), and an abandoned writer removes its temporary.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "formats/atomic_file.h"
#include "formats/tensor_set.h"

namespace bonsai {

class StreamWriter {
 public:
  virtual ~StreamWriter();
  StreamWriter(const StreamWriter&) = delete;
  StreamWriter& operator=(const StreamWriter&) = delete;

  const std::string& path() const { return path_; }
  // The table in file order (data null).
  const std::vector<Tensor>& tensors() const { return table_; }
  uint64_t file_bytes() const { return file_bytes_; }  // the finished file's size
  // What the writer itself keeps in memory: the encoded header, metadata and tensor table.
  uint64_t head_bytes() const { return head_.size(); }
  // The index of the tensor the next bytes belong to (the first not complete; tensors().size()
  // when all are).
  size_t current() const { return cur_; }

  // The next n bytes of the current tensor. Error naming the tensor when n runs past its end (or
  // every tensor is complete). The first write creates the temporary file.
  void write(const void* data, uint64_t n);

  // Writes tensor i (which must be current and untouched: Error naming it otherwise) from
  // fill(first_row, n_rows, out), which puts rows [first_row, first_row + n_rows) of the tensor
  // (each ne[0] elements of its type) at `out`. Chunks hold whole rows, at most max_chunk_bytes
  // (at least one row), in one buffer reused for the whole tensor: memory is one chunk.
  using RowFill = std::function<void(int64_t first_row, int64_t n_rows, uint8_t* out)>;
  void write_rows(size_t i, const RowFill& fill, uint64_t max_chunk_bytes);

  // Error naming the first tensor not complete; else pads to file_bytes() and puts the file in
  // place under path().
  void commit();

 protected:
  // `table`: the tensors in file order with their nbytes; data is ignored.
  StreamWriter(std::string path, std::span<const Tensor> table);
  // The layout a format's constructor computes: the bytes before the first tensor's data (written
  // first, rewritable in finish()), each tensor's offset in the file, and the file's size.
  void set_layout(std::vector<uint8_t> head, std::vector<uint64_t> offsets, uint64_t file_bytes);
  // Every byte of tensor i, in order, as it is written (for a format that checksums tensors).
  virtual void on_bytes(size_t /*i*/, const uint8_t* /*data*/, uint64_t /*n*/) {}
  // Tensor i is complete.
  virtual void on_tensor_done(size_t /*i*/) {}
  // Every tensor is written and padded, before the file is committed: a format whose head
  // depends on the data (a checksum) rewrites it here with rewrite_head().
  virtual void finish() {}
  std::vector<uint8_t>& head() { return head_; }
  void rewrite_head();

 private:
  void open();
  void zeros_to(uint64_t offset);
  void advance();  // past complete tensors (a tensor of no bytes is complete from the start)

  std::string path_;
  std::vector<Tensor> table_;
  std::vector<uint8_t> head_;
  std::vector<uint64_t> offsets_;
  uint64_t file_bytes_ = 0;
  std::unique_ptr<AtomicFile> file_;
  size_t cur_ = 0;
  uint64_t cur_done_ = 0;  // bytes of table_[cur_] written
};

// Writes every tensor's bytes (t.data; Error naming a tensor that has bytes but no data) and
// commits: the whole-model writers (write_gguf, write_bonsai) in one line.
void write_tensors(StreamWriter& w, std::span<const Tensor> tensors);

}  // namespace bonsai
