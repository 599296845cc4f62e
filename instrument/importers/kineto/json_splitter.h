// A streaming splitter for Chrome-trace JSON: cuts the top-level object into
// its members and the `traceEvents` array into its elements, so each piece can
// be parsed on its own (kineto_importer.cc parses them with simdjson). Only
// the piece being cut and one read chunk are in memory at a time; or the
// whole input is in memory already, and the pieces are views of it.
//
// The splitter checks the structure it walks (the root object or array, the
// keys, colons and commas between pieces, balanced brackets and closed strings
// inside a piece, nothing but whitespace after the root); a piece's own syntax
// is left to the parser of the piece.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "bytes.h"

namespace moetrace::importers::kineto {

// A JSON error at `byte` (1-based offset of the offending byte in the stream).
class JsonSplitError : public std::runtime_error {
 public:
  JsonSplitError(std::int64_t byte, const std::string& what) : std::runtime_error(what), byte_(byte) {}
  std::int64_t byte() const { return byte_; }

 private:
  std::int64_t byte_;
};

class JsonSplitter {
 public:
  // Reads up to `n` bytes into `dst`; 0 means the end of the input.
  using Read = std::function<std::size_t(char* dst, std::size_t n)>;

  // Every piece handed to the visitor is followed in memory by at least this
  // many readable bytes (simdjson's padding).
  static constexpr std::size_t kPadding = kBytesPadding;

  class Visitor {
   public:
    virtual ~Visitor() = default;
    // '{' (array = false) or '[': a bare array of events.
    virtual void root_begin(bool array) = 0;
    virtual void root_end(bool array) = 0;
    // A top-level member other than an array `traceEvents`; `key` unescaped,
    // `value` the raw JSON text of the value; `offset` its 0-based position.
    virtual void member(const std::string& key, std::string_view value, std::int64_t offset) = 0;
    // The member `traceEvents` whose value is an array.
    virtual void events_begin() = 0;
    virtual void events_end() = 0;
    // One element of the events array (an event object, normally).
    virtual void event(std::string_view value, std::int64_t offset) = 0;
    // The top level is a scalar, not an object or array.
    virtual void root_scalar(std::string_view value, std::int64_t offset) = 0;
  };

  explicit JsonSplitter(Read read, std::size_t chunk = std::size_t{1} << 18);
  // The whole input in memory, kPadding readable bytes after its end: the
  // pieces are views of it, valid as long as it is.
  explicit JsonSplitter(std::string_view text);

  // Walks the whole input; throws JsonSplitError on bad structure or a
  // truncated input. Exceptions of `read` and of the visitor pass through.
  void run(Visitor& visitor);

  // Bytes read from the input so far.
  std::int64_t bytes_read() const { return base_ + static_cast<std::int64_t>(end_); }

 private:
  static constexpr std::size_t kNone = static_cast<std::size_t>(-1);

  bool fill();           // reads more input, keeping [mark_, end_); false at the end
  int peek();            // next byte or -1 at the end, after skipping nothing
  int peek_non_ws();     // skips whitespace, then peek()
  std::int64_t offset() const { return base_ + static_cast<std::int64_t>(pos_); }
  [[noreturn]] void fail(const std::string& what) const;
  [[noreturn]] void fail_eof() const;
  // Scans one value starting at pos_ and returns its text (pos_ after it).
  std::string_view capture_value();
  void scan_string();     // pos_ just after the opening quote; leaves pos_ after the closing one
  void scan_container();  // pos_ just after the opening bracket
  void scan_scalar();
  void elements(Visitor& visitor);  // after '['; consumes the closing ']'
  // After an array element or object member (`what`): consumes the ',' that
  // goes on (false) or the `close` that ends it (true); else an error.
  bool closes(char close, const char* what);

  Read read_;
  std::size_t chunk_ = 0;
  Bytes buf_;                  // the read chunks (none for a text in memory)
  const char* data_ = nullptr;  // buf_'s bytes, or the text in memory
  std::size_t pos_ = 0, end_ = 0, mark_ = kNone;
  std::int64_t base_ = 0;  // stream offset of data_[0]
  bool eof_ = false;
};

// A JsonSplitter on a thread of its own: that thread reads and cuts the
// input, copying the pieces into batches (about `batch_bytes` each, at most
// `batches` waiting; for a text in memory the batches hold views of it); run() replays the visitor calls on the calling thread,
// in order. Errors of the reading thread (JsonSplitError, the read's own)
// are rethrown by run() after the calls before them; an exception of the
// visitor stops the reading thread. Memory: the batches plus the splitter's.
class ThreadedSplitter {
 public:
  explicit ThreadedSplitter(JsonSplitter::Read read, std::size_t chunk = std::size_t{1} << 18,
                            std::size_t batch_bytes = std::size_t{1} << 20, std::size_t batches = 4);
  // The whole input in memory (JsonSplitter(text)): it must outlive run().
  explicit ThreadedSplitter(std::string_view text, std::size_t batch_bytes = std::size_t{1} << 20,
                            std::size_t batches = 4);
  void run(JsonSplitter::Visitor& visitor);

  // The same on `threads` consumer threads (the calling one and threads - 1
  // more): each takes whole batches in turn and calls work(seq, replay),
  // where seq numbers the batches 0, 1, ... in input order and replay(v)
  // replays that batch's calls into v, in order. Batches run in any order
  // across threads; putting their results in order is the caller's (seq).
  // The first exception (of work, or of the reading thread) stops every
  // thread; run_parallel() rethrows, once all have stopped, the exception
  // of the earliest batch, the reading thread's counting as after every
  // batch before it.
  using Replayer = std::function<void(JsonSplitter::Visitor&)>;
  using BatchWork = std::function<void(std::size_t seq, const Replayer& replay)>;
  void run_parallel(std::size_t threads, const BatchWork& work);

 private:
  JsonSplitter::Read read_;
  std::optional<std::string_view> text_;
  std::size_t chunk_ = 0, batch_bytes_, batches_;
};

// The value of a JSON string's text between its quotes; false on a bad escape.
bool unescape_json_string(std::string_view raw, std::string& out);

}  // namespace moetrace::importers::kineto
