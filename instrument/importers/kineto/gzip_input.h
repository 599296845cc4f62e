// A std::streambuf over zlib's gzFile: reads .json.gz and plain .json alike
// (gzread passes uncompressed data through), so the JSON parser streams either
// without holding the file in memory.
#pragma once

#include <zlib.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <streambuf>
#include <string>

namespace moetrace::importers::kineto {

class GzipInput : public std::streambuf {
 public:
  // Throws moetrace::Error where the file cannot be opened.
  explicit GzipInput(const std::string& path);
  ~GzipInput() override;
  GzipInput(const GzipInput&) = delete;
  GzipInput& operator=(const GzipInput&) = delete;

  // Fraction of the file (compressed bytes) consumed so far, for progress;
  // safe to call while another thread reads.
  double fraction() const;
  std::int64_t bytes_out() const { return bytes_out_.load(std::memory_order_relaxed); }

  // Reads up to `n` decompressed bytes straight into `dst` (not through the
  // streambuf's buffer; do not mix with istream reads); 0 at the end of the
  // data. Throws moetrace::Error like underflow(). One reading thread at a
  // time; fraction() and bytes_out() may be called from any.
  std::size_t read(char* dst, std::size_t n);

 protected:
  // Throws moetrace::Error for damaged or truncated gzip data; the exception
  // passes through the JSON parser to the importer.
  int_type underflow() override;

 private:
  std::string path_;
  gzFile file_ = nullptr;
  std::int64_t size_ = 0;
  std::atomic<std::int64_t> bytes_out_{0}, offset_{0};
  std::array<char, 1 << 16> buffer_{};
};

}  // namespace moetrace::importers::kineto
