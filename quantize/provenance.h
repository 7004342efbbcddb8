// SHA-256 digests for the provenance of a quantized model (bonsai.provenance.*), OpenSSL libcrypto.
#pragma once
#include <string>
#include <vector>

namespace bonsai::quant {

// Lowercase hex SHA-256 of the concatenated bytes of `files`, in order (the calibration corpus:
// `cat FILES | sha256sum`).
std::string sha256_files(const std::vector<std::string>& files);

// The source model's digest: for a file, the SHA-256 of its bytes (`sha256sum FILE`); for a folder
// (Hugging Face), the SHA-256 of the `sha256sum`-style listing of its regular files in byte order
// of their names ("<hex>  <name>\n" each) — `cd DIR && sha256sum $(LC_ALL=C ls) | sha256sum` when
// the folder holds only files.
std::string source_sha256(const std::string& path);

}  // namespace bonsai::quant
