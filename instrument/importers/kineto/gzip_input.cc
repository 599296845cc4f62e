#include "gzip_input.h"

#include <algorithm>
#include <filesystem>

#include "moetrace/schema/error.h"

namespace moetrace::importers::kineto {

GzipInput::GzipInput(const std::string& path) : path_(path) {
  std::error_code ec;
  size_ = static_cast<std::int64_t>(std::filesystem::file_size(path, ec));
  if (ec) size_ = 0;
  file_ = gzopen(path.c_str(), "rb");
  if (!file_) throw Error(path + ": cannot open for reading");
  gzbuffer(file_, 1 << 17);
}

GzipInput::~GzipInput() {
  if (file_) gzclose(file_);
}

double GzipInput::fraction() const {
  if (size_ <= 0 || !file_) return 0.0;
  const auto at = static_cast<double>(offset_.load(std::memory_order_relaxed));
  return std::min(1.0, at / static_cast<double>(size_));
}

std::size_t GzipInput::read(char* dst, std::size_t n) {
  n = std::min<std::size_t>(n, 1u << 30);
  const int got = gzread(file_, dst, static_cast<unsigned>(n));
  int err = Z_OK;
  const char* msg = gzerror(file_, &err);
  if (got < 0 || (err != Z_OK && err != Z_STREAM_END)) {
    if (err == Z_BUF_ERROR) throw Error(path_ + ": the gzip data is truncated (unexpected end of file)");
    throw Error(path_ + ": damaged gzip data (" + std::string(msg ? msg : "read error") + ")");
  }
  bytes_out_ += got;
  offset_.store(gzoffset(file_), std::memory_order_relaxed);
  return static_cast<std::size_t>(got);
}

GzipInput::int_type GzipInput::underflow() {
  if (gptr() < egptr()) return traits_type::to_int_type(*gptr());
  const std::size_t n = read(buffer_.data(), buffer_.size());
  if (n == 0) return traits_type::eof();
  setg(buffer_.data(), buffer_.data(), buffer_.data() + n);
  return traits_type::to_int_type(*gptr());
}

}  // namespace moetrace::importers::kineto
