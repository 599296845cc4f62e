// A trace file's bytes, plain or gzip (.json.gz, told by its magic bytes, as
// zlib's gzread does): gzip is inflated with ISA-L's igzip (about ten times
// zlib's speed, BENCHMARKS.md), concatenated members included, anything but
// a member after a member ignored. The JSON parser streams either without
// holding the file in memory, except a small gzip file, inflated once whole
// (inflate_small) for both its last bytes and its parse.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <streambuf>
#include <string>
#include <vector>

#include "bytes.h"

struct inflate_state;

namespace moetrace::importers::kineto {

class GzipInput : public std::streambuf {
 public:
  // Throws moetrace::Error where the file cannot be opened.
  explicit GzipInput(const std::string& path);
  // The bytes of `path` already inflated (inflate_small), served from memory.
  GzipInput(const std::string& path, Bytes text);
  ~GzipInput() override;
  GzipInput(const GzipInput&) = delete;
  GzipInput& operator=(const GzipInput&) = delete;

  bool compressed() const { return state_ != nullptr; }
  // The file's size on disk (compressed bytes); 0 where unknown.
  std::int64_t file_size() const { return size_; }
  // A gzip file's last 4 bytes, its last member's ISIZE: the inflated size
  // of that member modulo 2^32 (RFC 1952); nullopt where unreadable.
  std::optional<std::uint32_t> last_member_size() const;

  // Fraction of the file (compressed bytes) consumed so far, for progress;
  // safe to call while another thread reads.
  double fraction() const;
  std::int64_t bytes_out() const { return bytes_out_.load(std::memory_order_relaxed); }

  // The whole text where it is served from memory (inflate_small), with
  // kBytesPadding readable bytes after it, counted as read; nullopt where
  // it is not (read() serves the input then).
  std::optional<std::string_view> take_text();

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
  std::optional<Bytes> text_;  // the inflated file (the constructor from text); text_read_ bytes of it read
  std::size_t text_read_ = 0;
};

// The whole inflated text of a small gzip file: at most kSmallGzip bytes on
// disk and kSmallText inflated, in one gzip member (as profilers write
// them: the trailer's size is the text's). nullopt for a plain file, a
// larger one, one of several members, or one that cannot be read or
// inflated (the streaming parse then says why). Its last bytes and its
// parse then take one inflation, not two, and none of the streaming tail's
// 5 MiB buffer (kineto_parse.cc: read_tail). The bound on the text is one of
// wall time: inflated whole, a file is inflated before its parse starts,
// where the streaming path inflates while it parses. Measured start to exit
// on the VM (`report`, medians of 9, BENCHMARKS.md): HTA's two sampled
// ranks (1.7 MB of JSON each) 88 -> 74 ms inflated whole, its nccl_data
// rank (9.8 MB) 110 -> 127 ms; below 4 MiB the one inflation saved
// outweighs the overlap lost.
inline constexpr std::int64_t kSmallGzip = std::int64_t{1} << 20;
inline constexpr std::size_t kSmallText = std::size_t{4} << 20;
std::optional<Bytes> inflate_small(const std::string& path);

}  // namespace moetrace::importers::kineto
