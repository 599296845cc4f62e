// A std::streambuf over zlib's gzFile: reads .json.gz and plain .json alike
// (gzread passes uncompressed data through), so the JSON parser streams either
// without holding the file in memory.
#pragma once

#include <zlib.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <streambuf>
#include <string>
#include <thread>
#include <vector>

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
  // data. Throws moetrace::Error like underflow().
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

// Reads a GzipInput on a thread of its own, a few blocks ahead of the
// consumer, so decompression (or the read syscalls) overlap the parsing.
class ReadAhead {
 public:
  explicit ReadAhead(GzipInput& in, std::size_t block = std::size_t{1} << 20, std::size_t blocks = 4);
  ~ReadAhead();  // stops the thread (it may be inside one read) and joins it
  ReadAhead(const ReadAhead&) = delete;
  ReadAhead& operator=(const ReadAhead&) = delete;

  // GzipInput::read on the consumer's side: up to `n` bytes, 0 at the end;
  // rethrows the reader's exception once the data before it is consumed.
  std::size_t read(char* dst, std::size_t n);

 private:
  struct Block {
    std::vector<char> data;
    std::size_t size = 0;
  };
  void run();

  GzipInput& in_;
  std::vector<Block> blocks_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::size_t head_ = 0, filled_ = 0, offset_ = 0;  // consumer at blocks_[head_] + offset_
  bool done_ = false, stop_ = false;
  std::exception_ptr error_;
  std::thread thread_;
};

}  // namespace moetrace::importers::kineto
