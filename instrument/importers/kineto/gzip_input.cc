#include "gzip_input.h"

#include <fcntl.h>
#include <isa-l/igzip_lib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "moetrace/schema/error.h"

namespace moetrace::importers::kineto {

namespace {

constexpr std::size_t kInputChunk = std::size_t{1} << 17;

bool gzip_magic(const unsigned char* p) { return p[0] == 0x1f && p[1] == 0x8b; }

std::string inflate_error(int code) {
  switch (code) {
    case ISAL_INVALID_BLOCK: return "invalid deflate block";
    case ISAL_INVALID_SYMBOL: return "invalid deflate symbol";
    case ISAL_INVALID_LOOKBACK: return "invalid distance too far back";
    case ISAL_INVALID_WRAPPER: return "invalid gzip header";
    case ISAL_UNSUPPORTED_METHOD: return "unknown compression method";
    case ISAL_INCORRECT_CHECKSUM: return "incorrect data check";
    default: return "error " + std::to_string(code);
  }
}

}  // namespace

GzipInput::GzipInput(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw Error(path + ": cannot open for reading (" + std::strerror(errno) + ")");
  struct stat st {};
  if (::fstat(fd_, &st) == 0) size_ = st.st_size;
  in_.resize(kInputChunk);
  // The first two bytes tell gzip from plain; either way they are read again.
  while (in_end_ < 2 && fill_input()) {
  }
  if (in_end_ >= 2 && gzip_magic(in_.data())) {
    state_ = std::make_unique<inflate_state>();
    isal_inflate_init(state_.get());
    state_->crc_flag = ISAL_GZIP;  // parses the header, checks the trailer's CRC and size
  }
}

GzipInput::GzipInput(const std::string& path, Bytes text)
    : path_(path), size_(static_cast<std::int64_t>(text.size())), text_(std::move(text)) {}

std::optional<std::uint32_t> GzipInput::last_member_size() const {
  unsigned char le[4] = {};
  if (fd_ < 0 || size_ < 4 || ::pread(fd_, le, 4, size_ - 4) != 4) return std::nullopt;
  return le[0] | (le[1] << 8) | (le[2] << 16) | (static_cast<std::uint32_t>(le[3]) << 24);
}

std::optional<Bytes> inflate_small(const std::string& path) {
  try {
    GzipInput in(path);
    if (!in.compressed() || in.file_size() < 18 || in.file_size() > kSmallGzip) return std::nullopt;
    // Exact below kSmallText for a file of one member; one byte of room
    // tells a file of several, whose text is longer.
    const auto isize = in.last_member_size();
    if (!isize || *isize > kSmallText) return std::nullopt;
    // Room for the padding the JSON splitter's pieces need after them
    // (take_text()): the bytes past size() up to capacity().
    Bytes text;
    text.reserve(std::size_t{*isize} + 1 + kBytesPadding);
    text.resize(std::size_t{*isize} + 1);
    std::size_t used = 0;
    while (const std::size_t got = in.read(text.data() + used, text.size() - used)) {
      used += got;
      if (used == text.size()) return std::nullopt;
    }
    if (used != *isize) return std::nullopt;
    text.resize(used);
    return text;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

GzipInput::~GzipInput() {
  if (fd_ >= 0) ::close(fd_);
}

double GzipInput::fraction() const {
  if (size_ <= 0) return 0.0;
  const auto at = static_cast<double>(offset_.load(std::memory_order_relaxed));
  return std::min(1.0, at / static_cast<double>(size_));
}

std::size_t GzipInput::read_file(char* dst, std::size_t n) {
  for (;;) {
    const ssize_t got = ::read(fd_, dst, n);
    if (got >= 0) {
      offset_.fetch_add(got, std::memory_order_relaxed);
      return static_cast<std::size_t>(got);
    }
    if (errno != EINTR) throw Error(path_ + ": read error (" + std::strerror(errno) + ")");
  }
}

bool GzipInput::fill_input() {
  if (file_end_) return false;
  if (in_pos_ > 0) {
    std::memmove(in_.data(), in_.data() + in_pos_, in_end_ - in_pos_);
    in_end_ -= in_pos_;
    in_pos_ = 0;
  }
  if (in_end_ == in_.size()) return true;
  const std::size_t got = read_file(reinterpret_cast<char*>(in_.data()) + in_end_, in_.size() - in_end_);
  if (got == 0) file_end_ = true;
  in_end_ += got;
  return got > 0;
}

std::size_t GzipInput::inflate(char* dst, std::size_t n) {
  inflate_state& s = *state_;
  s.next_out = reinterpret_cast<std::uint8_t*>(dst);
  s.avail_out = static_cast<std::uint32_t>(std::min<std::size_t>(n, std::size_t{1} << 30));
  const std::uint32_t want = s.avail_out;
  while (!data_end_ && s.avail_out > 0) {
    if (s.block_state == ISAL_BLOCK_FINISH) {
      // A member ended: another follows where the gzip magic does (as with
      // `cat a.gz b.gz`); whatever else follows is ignored, as gzread does.
      while (in_end_ - in_pos_ < 2 && fill_input()) {
      }
      if (in_end_ - in_pos_ >= 2 && gzip_magic(in_.data() + in_pos_)) {
        isal_inflate_reset(&s);
        s.crc_flag = ISAL_GZIP;
      } else {
        data_end_ = true;
        break;
      }
    }
    if (in_pos_ == in_end_ && !fill_input()) {
      // The input ended inside a member (ISA-L keeps a header's or a
      // block's partial bytes itself, so all input is consumed by then).
      if (s.avail_out < want) break;  // deliver what came out first
      throw Error(path_ + ": the gzip data is truncated (unexpected end of file)");
    }
    s.next_in = in_.data() + in_pos_;
    s.avail_in = static_cast<std::uint32_t>(in_end_ - in_pos_);
    const int r = isal_inflate(&s);
    in_pos_ = static_cast<std::size_t>(s.next_in - in_.data());
    if (r < 0) throw Error(path_ + ": damaged gzip data (" + inflate_error(r) + ")");
    if (s.avail_out < want && s.block_state != ISAL_BLOCK_FINISH && in_pos_ == in_end_) break;
  }
  return want - s.avail_out;
}

std::optional<std::string_view> GzipInput::take_text() {
  if (!text_ || text_read_ != 0 || text_->capacity() < text_->size() + kBytesPadding) return std::nullopt;
  text_read_ = text_->size();
  offset_.store(static_cast<std::int64_t>(text_read_), std::memory_order_relaxed);
  bytes_out_.store(static_cast<std::int64_t>(text_read_), std::memory_order_relaxed);
  return view(*text_);
}

std::size_t GzipInput::read(char* dst, std::size_t n) {
  std::size_t got = 0;
  if (text_) {
    got = std::min(n, text_->size() - text_read_);
    std::memcpy(dst, text_->data() + text_read_, got);
    text_read_ += got;
    offset_.fetch_add(static_cast<std::int64_t>(got), std::memory_order_relaxed);
  } else if (state_) {
    got = inflate(dst, n);
  } else if (in_pos_ < in_end_) {  // the bytes read to tell the format
    got = std::min(n, in_end_ - in_pos_);
    std::memcpy(dst, in_.data() + in_pos_, got);
    in_pos_ += got;
  } else {
    got = read_file(dst, n);
  }
  bytes_out_.fetch_add(static_cast<std::int64_t>(got), std::memory_order_relaxed);
  return got;
}

GzipInput::int_type GzipInput::underflow() {
  if (gptr() < egptr()) return traits_type::to_int_type(*gptr());
  buffer_.resize(std::size_t{1} << 16);
  const std::size_t n = read(buffer_.data(), buffer_.size());
  if (n == 0) return traits_type::eof();
  setg(buffer_.data(), buffer_.data(), buffer_.data() + n);
  return traits_type::to_int_type(*gptr());
}

}  // namespace moetrace::importers::kineto
