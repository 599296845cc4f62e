#include "gzip_input.h"

#include <algorithm>
#include <cstring>
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

ReadAhead::ReadAhead(GzipInput& in, std::size_t block, std::size_t blocks)
    : in_(in), blocks_(std::max<std::size_t>(blocks, 2)) {
  for (auto& b : blocks_) b.data.resize(std::max<std::size_t>(block, 1));
  thread_ = std::thread([this] { run(); });
}

ReadAhead::~ReadAhead() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void ReadAhead::run() {
  std::size_t tail = 0;  // the block being filled; the consumer does not touch it
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      changed_.wait(lock, [this] { return stop_ || filled_ < blocks_.size(); });
      if (stop_) return;
    }
    auto& b = blocks_[tail];
    std::size_t n = 0;
    std::exception_ptr error;
    try {
      n = in_.read(b.data.data(), b.data.size());
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard lock(mutex_);
      if (error || n == 0) {
        error_ = error;
        done_ = true;
      } else {
        b.size = n;
        ++filled_;
      }
    }
    changed_.notify_all();
    if (error || n == 0) return;
    tail = (tail + 1) % blocks_.size();
  }
}

std::size_t ReadAhead::read(char* dst, std::size_t n) {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [this] { return filled_ > 0 || done_; });
  if (filled_ == 0) {
    if (error_) std::rethrow_exception(error_);
    return 0;
  }
  auto& b = blocks_[head_];
  lock.unlock();  // the producer does not touch a filled block
  n = std::min(n, b.size - offset_);
  std::memcpy(dst, b.data.data() + offset_, n);
  offset_ += n;
  if (offset_ == b.size) {
    offset_ = 0;
    head_ = (head_ + 1) % blocks_.size();
    lock.lock();
    --filled_;
    lock.unlock();
    changed_.notify_all();
  }
  return n;
}

GzipInput::int_type GzipInput::underflow() {
  if (gptr() < egptr()) return traits_type::to_int_type(*gptr());
  const std::size_t n = read(buffer_.data(), buffer_.size());
  if (n == 0) return traits_type::eof();
  setg(buffer_.data(), buffer_.data(), buffer_.data() + n);
  return traits_type::to_int_type(*gptr());
}

}  // namespace moetrace::importers::kineto
