// Synthetic models: random weights at the real shapes of a known model, in any weight type, for
// speed measurements at real scale. Marked synthetic in the metadata (general.name and
// bonsai.synthetic); with a tokenizer the GGUF is complete enough for llama.cpp to load.
//
// Streamed: each tensor is generated in chunks of rows straight into the file's writer
// (formats/stream_writer.h), so memory is one chunk and one tensor's residual, not the model: a
// 14B BF16 (29.5 GB) is made on a 24 GB machine, and a disk needs room for the file alone.
// Generation is deterministic per (seed, tensor, row), whatever the chunking and the thread count.
// A .bonsai output holds per-tensor checksums in its table, before the data: its writer
// (BonsaiWriter) computes each as the tensor streams past and rewrites the table before the file
// is committed, so the model is generated once, in either format.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "formats/types.h"
#include "runtime/model.h"

namespace bonsai {

struct SynthOptions {
  std::string arch = "qwen3";
  std::string size = "0.6b";
  // A Hugging Face config.json (or the model folder holding it): its architecture and shapes
  // instead of arch and size.
  std::string config;
  TypeId type = TypeId::PTQ1_0;         // the blocks' linear weights
  TypeId embd_type = TypeId::Q8_0;      // token_embd.weight
  TypeId output_type = TypeId::Q8_0;    // output.weight (untied sizes only)
  std::string tokenizer;                // tokenizer.json; empty: no tokenizer keys
  uint64_t seed = 1;
  // Residual codebooks (formats/residual.h, kmeans scheme) on every block weight, PQ2_0 only:
  // random fp16 centroids and random indices in the quantizer's layout and keys, so that bench
  // measures what the residual costs. rc_rows: rows per codebook, 0 = all rows of each tensor.
  bool residual = false;
  int64_t rc_dim = 8, rc_size = 16, rc_rows = 0;
};

// What synth is about to write, known before it creates anything.
struct SynthPlan {
  std::string model;            // "qwen3-14b", or "qwen3 from <config.json>"
  size_t tensors = 0;
  uint64_t file_bytes = 0;      // the finished file
  uint64_t data_bytes = 0;      // of which tensor data (what progress counts)
  // Synth's own buffers at most, beyond the program itself: one chunk of rows, one tensor's
  // residual, the file's encoded head and the metadata it is made from.
  uint64_t memory_bytes = 0;
  uint64_t available_bytes = 0;  // free on the output's filesystem
};

struct SynthHooks {
  // Called once the plan is made, before the free space is checked and before anything is
  // created.
  std::function<void(const SynthPlan&)> plan;
  // Tensor bytes written so far and in all, after each chunk of rows.
  std::function<void(uint64_t done, uint64_t total)> progress;
  // The free bytes on the filesystem of `path`; empty: formats/atomic_file.h's available_bytes
  // (statvfs). Tests give a smaller one.
  std::function<uint64_t(const std::string& path)> available;
};

// The sizes synth knows for an architecture ("tiny", "0.6b", "1.7b", "4b", "8b", "14b", "32b" for
// qwen3).
std::vector<std::string> synth_sizes(const std::string& arch);
// The configuration of a known size; tied says whether the real model ties its head.
ModelConfig synth_config(const std::string& arch, const std::string& size, bool* tied);
// The configuration o asks for: o.config's when set (tied as its tie_word_embeddings says), else
// o.arch and o.size's.
ModelConfig synth_config(const SynthOptions& o, bool* tied);
// Writes the model (.gguf or .bonsai by extension). Error before creating anything when the
// residual options do not fit the type or the shapes, a tensor cannot be stored in its type, or
// the output's filesystem has less free space than the file needs.
void synth_model(const SynthOptions& o, const std::string& out, const SynthHooks& hooks = {});

}  // namespace bonsai
