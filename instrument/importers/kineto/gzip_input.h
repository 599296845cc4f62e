// A trace file's bytes, plain or gzip (.json.gz, told by its magic bytes, as
// zlib's gzread does): gzip is inflated with ISA-L's igzip (about ten times
// zlib's speed, BENCHMARKS.md), concatenated members included, anything but
// a member after a member ignored. The JSON parser streams either without
// holding the file in memory.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <streambuf>
#include <string>
#include <vector>

struct inflate_state;

namespace moetrace::importers::kineto {

class GzipInput : public std::streambuf {
 public:
  // Throws moetrace::Error where the file cannot be opened.
  explicit GzipInput(const std::string& path);
  ~GzipInput() override;
  GzipInput(const GzipInput&) = delete;
  GzipInput& operator=(const GzipInput&) = delete;

  bool compressed() const { return state_ != nullptr; }

  // Fraction of the file (compressed bytes) consumed so far, for progress;
  // safe to call while another thread reads.
  double fraction() const;
  std::int64_t bytes_out() const { return bytes_out_.load(std::memory_order_relaxed); }

  // Reads up to `n` (decompressed) bytes straight into `dst` (not through the
  // streambuf's buffer; do not mix with istream reads); 0 at the end of the
  // data. Throws moetrace::Error for damaged or truncated gzip data and read
  // errors. One reading thread at a time; fraction() and bytes_out() may be
  // called from any.
  std::size_t read(char* dst, std::size_t n);

 protected:
  // Throws like read(); the exception passes through the JSON parser to the
  // importer.
  int_type underflow() override;

 private:
  std::size_t read_file(char* dst, std::size_t n);  // raw bytes; 0 at the end
  bool fill_input();                                // false at the end of the file
  std::size_t inflate(char* dst, std::size_t n);

  std::string path_;
  int fd_ = -1;
  std::int64_t size_ = 0;
  std::unique_ptr<inflate_state> state_;  // null for a plain file
  std::vector<unsigned char> in_;         // compressed bytes read, [in_pos_, in_end_) not yet inflated
  std::size_t in_pos_ = 0, in_end_ = 0;
  bool file_end_ = false, data_end_ = false;
  std::atomic<std::int64_t> bytes_out_{0}, offset_{0};
  std::vector<char> buffer_;  // underflow()'s
};

}  // namespace moetrace::importers::kineto
