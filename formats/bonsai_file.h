// The `.bonsai` container, version 1 (docs/formats/bonsai.md): metadata (architecture,
// hyperparameters, tokenizer, plan, provenance), a tensor table with a checksum per tensor,
// aligned data. The reader verifies every checksum it is asked to and names the tensor whose
// bytes do not match; the writer is atomic and streams (BonsaiWriter), write_bonsai is built on it.
#pragma once
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "formats/stream_writer.h"
#include "formats/tensor_set.h"

namespace bonsai {

struct BonsaiReadOptions {
  bool verify_checksums = true;
};

TensorSet read_bonsai(const std::string& path, const BonsaiReadOptions& opts = {});

// `.bonsai` written tensor by tensor (formats/stream_writer.h). Adds the provenance keys the
// format requires when the caller has not set them (bonsai.tool_version, bonsai.created — pinned
// by SOURCE_DATE_EPOCH when set). The constructor checks the metadata (reserved keys included),
// every entry (name, type, shape, nbytes; data is not read) and every link, and creates nothing.
// The per-tensor checksums sit in the table, before the data they cover: each is computed as its
// tensor streams past, and the table and header are rewritten with them at commit — one pass
// over the data, nothing regenerated, and the temporary is not the output until then.
class BonsaiWriter : public StreamWriter {
 public:
  BonsaiWriter(std::string path, const Metadata& meta, std::span<const Tensor> table);
  ~BonsaiWriter() override;

 private:
  void on_bytes(size_t i, const uint8_t* data, uint64_t n) override;
  void on_tensor_done(size_t i) override;
  void finish() override;

  struct Hash;
  std::unique_ptr<Hash> hash_;
  std::vector<uint64_t> checksums_;    // per tensor, as each completes
  std::vector<uint64_t> checksum_at_;  // where each sits in the head
};

// The same from tensors in memory: BonsaiWriter with every tensor's data.
void write_bonsai(const std::string& path, const Metadata& meta, std::span<const Tensor> tensors);

}  // namespace bonsai
