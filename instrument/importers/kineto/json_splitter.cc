#include "json_splitter.h"

#include <algorithm>
#include <array>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <cstring>
#include <utility>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace moetrace::importers::kineto {

namespace {

// Bytes that matter while scanning a container outside strings.
constexpr std::array<bool, 256> kContainerByte = [] {
  std::array<bool, 256> t{};
  for (unsigned char c : {'"', '{', '}', '[', ']'}) t[c] = true;
  return t;
}();

// Bytes that end a scalar (number or literal).
constexpr std::array<bool, 256> kScalarEnd = [] {
  std::array<bool, 256> t{};
  for (unsigned char c : {',', ']', '}', ':', ' ', '\t', '\n', '\r', '"', '[', '{'}) t[c] = true;
  return t;
}();

bool is_ws(int c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

std::string describe(int c) {
  if (c < 0) return "end of input";
  if (c >= 0x20 && c < 0x7f) return std::string("'") + static_cast<char>(c) + "'";
  static const char* hex = "0123456789abcdef";
  return std::string("byte 0x") + hex[(c >> 4) & 15] + hex[c & 15];
}

void append_utf8(std::uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

bool hex4(std::string_view s, std::size_t at, std::uint32_t& v) {
  if (at + 4 > s.size()) return false;
  v = 0;
  for (std::size_t i = at; i < at + 4; ++i) {
    const char c = s[i];
    v <<= 4;
    if (c >= '0' && c <= '9') v |= static_cast<std::uint32_t>(c - '0');
    else if (c >= 'a' && c <= 'f') v |= static_cast<std::uint32_t>(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') v |= static_cast<std::uint32_t>(c - 'A' + 10);
    else return false;
  }
  return true;
}

}  // namespace

bool unescape_json_string(std::string_view raw, std::string& out) {
  out.clear();
  for (std::size_t i = 0; i < raw.size(); ++i) {
    const char c = raw[i];
    if (static_cast<unsigned char>(c) < 0x20) return false;
    if (c != '\\') {
      out += c;
      continue;
    }
    if (++i >= raw.size()) return false;
    switch (raw[i]) {
      case '"': out += '"'; break;
      case '\\': out += '\\'; break;
      case '/': out += '/'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'u': {
        std::uint32_t cp = 0;
        if (!hex4(raw, i + 1, cp)) return false;
        i += 4;
        if (cp >= 0xD800 && cp < 0xDC00) {
          std::uint32_t low = 0;
          if (i + 2 >= raw.size() || raw[i + 1] != '\\' || raw[i + 2] != 'u' || !hex4(raw, i + 3, low) ||
              low < 0xDC00 || low >= 0xE000)
            return false;
          i += 6;
          cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
        } else if (cp >= 0xDC00 && cp < 0xE000) {
          return false;
        }
        append_utf8(cp, out);
        break;
      }
      default: return false;
    }
  }
  return true;
}

JsonSplitter::JsonSplitter(Read read, std::size_t chunk)
    : read_(std::move(read)), chunk_(chunk == 0 ? 1 : chunk) {
  buf_.resize(chunk_ + kPadding);
  data_ = buf_.data();
}

JsonSplitter::JsonSplitter(std::string_view text) : data_(text.data()), end_(text.size()), eof_(true) {}

bool JsonSplitter::fill() {
  if (eof_) return false;
  const std::size_t keep = mark_ != kNone ? mark_ : pos_;
  if (keep > 0) {
    std::memmove(buf_.data(), buf_.data() + keep, end_ - keep);
    base_ += static_cast<std::int64_t>(keep);
    pos_ -= keep;
    end_ -= keep;
    if (mark_ != kNone) mark_ -= keep;
  }
  const std::size_t room = buf_.size() - kPadding - end_;
  if (room < chunk_) buf_.resize(std::max(end_ + chunk_ + kPadding, buf_.size() * 2));
  data_ = buf_.data();
  const std::size_t n = read_(buf_.data() + end_, chunk_);
  if (n == 0) {
    eof_ = true;
    return false;
  }
  end_ += n;
  return true;
}

int JsonSplitter::peek() {
  if (pos_ == end_ && !fill()) return -1;
  return static_cast<unsigned char>(data_[pos_]);
}

int JsonSplitter::peek_non_ws() {
  for (;;) {
    while (pos_ < end_ && is_ws(data_[pos_])) ++pos_;
    if (pos_ < end_) return static_cast<unsigned char>(data_[pos_]);
    if (!fill()) return -1;
  }
}

void JsonSplitter::fail(const std::string& what) const { throw JsonSplitError(offset() + 1, what); }

void JsonSplitter::fail_eof() const {
  throw JsonSplitError(bytes_read() + 1, "unexpected end of input (truncated file?)");
}

void JsonSplitter::scan_string() {
  for (;;) {
    const char* const data = data_;
    std::size_t p = pos_;
    while (p < end_) {
      const char c = data[p];
      if (c == '"') {
        pos_ = p + 1;
        return;
      }
      if (c == '\\') {
        if (p + 1 >= end_) break;  // the escaped byte is in the next chunk
        p += 2;
        continue;
      }
      ++p;
    }
    pos_ = p;
    if (!fill()) fail_eof();
  }
}

void JsonSplitter::scan_container() {
  // State across bytes and refills: bracket depth, inside a string, and
  // "the next byte is escaped" (a backslash in a string).
  int depth = 1;
  bool string = false, escaped = false;
  for (;;) {
    const char* const data = data_;
    std::size_t p = pos_;
#if defined(__SSE2__)
    const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\'), lower = _mm_set1_epi8(0x20);
    const __m128i open = _mm_set1_epi8('{'), close = _mm_set1_epi8('}');  // '[' | 0x20 == '{', ']' | 0x20 == '}'
    // 64 bytes at a time where they hold no backslash (nearly all of a
    // trace): the bytes inside strings are found at once, as the prefix XOR
    // of the quotes' bits (simdjson's stage 1 does the same), and only the
    // brackets outside strings are visited, in order. A block with a
    // backslash, or after one, goes 16 bytes at a time below.
    while (p + 16 <= end_) {
      while (p + 64 <= end_ && !escaped) {
        std::uint64_t quotes = 0, slashes = 0, opens = 0, closes = 0;
        for (int k = 0; k < 4; ++k) {
          const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(data + p + 16 * k));
          const __m128i folded = _mm_or_si128(v, lower);
          const auto shift = static_cast<unsigned>(16 * k);
          quotes |= std::uint64_t{static_cast<std::uint16_t>(_mm_movemask_epi8(_mm_cmpeq_epi8(v, quote)))} << shift;
          slashes |= std::uint64_t{static_cast<std::uint16_t>(_mm_movemask_epi8(_mm_cmpeq_epi8(v, backslash)))} << shift;
          opens |= std::uint64_t{static_cast<std::uint16_t>(_mm_movemask_epi8(_mm_cmpeq_epi8(folded, open)))} << shift;
          closes |= std::uint64_t{static_cast<std::uint16_t>(_mm_movemask_epi8(_mm_cmpeq_epi8(folded, close)))} << shift;
        }
        if (slashes) break;
        // Bit i: an odd number of quotes at or before byte i, i.e. inside a
        // string that opened in this block (its closing quote excluded).
        std::uint64_t inside = quotes;
        inside ^= inside << 1, inside ^= inside << 2, inside ^= inside << 4;
        inside ^= inside << 8, inside ^= inside << 16, inside ^= inside << 32;
        const bool odd = inside >> 63;  // an odd number of quotes in the block
        if (string) inside = ~inside;
        std::uint64_t brackets = (opens | closes) & ~inside;
        while (brackets) {
          const auto i = static_cast<unsigned>(__builtin_ctzll(brackets));
          brackets &= brackets - 1;
          if (opens >> i & 1) {
            ++depth;
          } else if (--depth == 0) {
            pos_ = p + i + 1;
            return;
          }
        }
        string ^= odd;
        p += 64;
      }
      // 16 bytes at a time, up to the next 64: a bit per quote, backslash and
      // bracket, handled in order; runs of other bytes cost one compare each
      // 16 bytes.
      for (const std::size_t block_end = p + 64; p + 16 <= end_ && p < block_end;) {
        const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(data + p));
        const __m128i folded = _mm_or_si128(v, lower);
        const auto opens = static_cast<unsigned>(_mm_movemask_epi8(_mm_cmpeq_epi8(folded, open)));
        const auto closes = static_cast<unsigned>(_mm_movemask_epi8(_mm_cmpeq_epi8(folded, close)));
        const auto quotes = static_cast<unsigned>(_mm_movemask_epi8(_mm_cmpeq_epi8(v, quote)));
        const auto slashes = static_cast<unsigned>(_mm_movemask_epi8(_mm_cmpeq_epi8(v, backslash)));
        unsigned bits = opens | closes | quotes | slashes;
        if (escaped) {
          bits &= ~1u;
          escaped = false;
        }
        while (bits) {
          const unsigned i = static_cast<unsigned>(__builtin_ctz(bits));
          const unsigned bit = 1u << i;
          bits &= bits - 1;
          if (string) {
            if (slashes & bit) {
              if (i == 15) escaped = true;
              else bits &= ~(bit << 1);
            } else if (quotes & bit) {
              string = false;
            }
          } else if (quotes & bit) {
            string = true;
          } else if (opens & bit) {
            ++depth;
          } else if ((closes & bit) && --depth == 0) {
            pos_ = p + i + 1;
            return;
          }
        }
        p += 16;
      }
    }
#endif
    for (; p < end_; ++p) {
      const char c = data[p];
      if (escaped) {
        escaped = false;
      } else if (string) {
        if (c == '\\') escaped = true;
        else if (c == '"') string = false;
      } else if (kContainerByte[static_cast<unsigned char>(c)]) {
        if (c == '"') {
          string = true;
        } else if (c == '{' || c == '[') {
          ++depth;
        } else if (--depth == 0) {
          pos_ = p + 1;
          return;
        }
      }
    }
    pos_ = p;
    if (!fill()) fail_eof();
  }
}

void JsonSplitter::scan_scalar() {
  for (;;) {
    while (pos_ < end_ && !kScalarEnd[static_cast<unsigned char>(data_[pos_])]) ++pos_;
    if (pos_ < end_ || !fill()) return;
  }
}

std::string_view JsonSplitter::capture_value() {
  mark_ = pos_;
  const int c = peek();
  if (c == '{' || c == '[') {
    ++pos_;
    scan_container();
  } else if (c == '"') {
    ++pos_;
    scan_string();
  } else {
    scan_scalar();
    if (pos_ == mark_) {
      mark_ = kNone;
      if (c < 0) fail_eof();
      fail("expected a value, not " + describe(c));
    }
  }
  std::string_view text(data_ + mark_, pos_ - mark_);
  mark_ = kNone;
  return text;
}

void JsonSplitter::elements(Visitor& visitor) {
  int c = peek_non_ws();
  if (c == ']') {
    ++pos_;
    return;
  }
  for (;;) {
    if (c < 0) fail_eof();
    if (c == ',' || c == ']') fail("expected a value, not " + describe(c));
    const auto at = offset();
    visitor.event(capture_value(), at);
    if (closes(']', "an array element")) return;
    c = peek_non_ws();
  }
}

bool JsonSplitter::closes(char close, const char* what) {
  const int c = peek_non_ws();
  if (c < 0) fail_eof();
  ++pos_;
  if (c == close) return true;
  if (c != ',') {
    --pos_;
    fail(std::string("expected ',' or '") + close + "' after " + what + ", not " + describe(c));
  }
  return false;
}

void JsonSplitter::run(Visitor& visitor) {
  int c = peek_non_ws();
  if (c < 0) fail_eof();
  if (c == '[') {
    ++pos_;
    visitor.root_begin(true);
    elements(visitor);
    visitor.root_end(true);
  } else if (c == '{') {
    ++pos_;
    visitor.root_begin(false);
    c = peek_non_ws();
    if (c == '}') {
      ++pos_;
    } else {
      std::string key;
      for (;;) {
        if (c < 0) fail_eof();
        if (c != '"') fail("expected a member name (a string), not " + describe(c));
        mark_ = pos_;
        ++pos_;
        scan_string();
        const std::string_view raw(data_ + mark_ + 1, pos_ - mark_ - 2);
        const auto key_at = base_ + static_cast<std::int64_t>(mark_);
        mark_ = kNone;
        if (!unescape_json_string(raw, key)) throw JsonSplitError(key_at + 1, "invalid string in a member name");
        c = peek_non_ws();
        if (c < 0) fail_eof();
        if (c != ':') fail("expected ':' after a member name, not " + describe(c));
        ++pos_;
        c = peek_non_ws();
        if (c < 0) fail_eof();
        if (key == "traceEvents" && c == '[') {
          ++pos_;
          visitor.events_begin();
          elements(visitor);
          visitor.events_end();
        } else {
          const auto at = offset();
          visitor.member(key, capture_value(), at);
        }
        if (closes('}', "an object member")) break;
        c = peek_non_ws();
      }
    }
    visitor.root_end(false);
  } else {
    const auto at = offset();
    visitor.root_scalar(capture_value(), at);
  }
  c = peek_non_ws();
  if (c >= 0) fail("unexpected " + describe(c) + " after the top-level value");
}

namespace {

enum class CallKind : std::uint8_t { kRootBegin, kRootEnd, kMember, kEventsBegin, kEventsEnd, kEvent, kRootScalar };

struct Call {
  CallKind kind;
  bool array = false;
  std::size_t pos = 0, len = 0;          // the piece in Batch::text, or in Batch::source
  std::size_t key_pos = 0, key_len = 0;  // a member's name in Batch::text
  std::int64_t offset = 0;
};

struct Batch {
  Bytes text;  // pieces back to back, kPadding spare bytes at the end
  std::size_t used = 0;
  // The input in memory, where the pieces are (only the keys are in text).
  const char* source = nullptr;
  std::size_t weight = 0;  // the bytes of the pieces and keys
  std::vector<Call> calls;
  void clear() {
    used = 0;
    weight = 0;
    calls.clear();
  }
};

// The hand-over between the two threads.
class Channel {
 public:
  explicit Channel(std::size_t capacity) : capacity_(capacity) {}

  struct Stopped {};  // thrown on the reading thread once the consumer quit

  // Reading thread: a batch to fill (recycled where possible).
  Batch take_empty() {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [this] { return stop_ || full_.size() < capacity_; });
    if (stop_) throw Stopped{};
    if (free_.empty()) return Batch{};
    Batch b = std::move(free_.back());
    free_.pop_back();
    return b;
  }
  void push(Batch&& b) {
    {
      std::lock_guard lock(mutex_);
      full_.push_back(std::move(b));
    }
    changed_.notify_all();
  }
  void finish(std::exception_ptr error) {
    {
      std::lock_guard lock(mutex_);
      done_ = true;
      error_ = std::move(error);
    }
    changed_.notify_all();
  }
  // Consumer: the next batch and its number in input order, or false at
  // the end (after rethrowing an error) or once stopped.
  bool pop(Batch& b, std::size_t* seq = nullptr) {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [this] { return !full_.empty() || done_ || stop_; });
    if (stop_) return false;
    if (full_.empty()) {
      if (error_) std::rethrow_exception(error_);
      return false;
    }
    b = std::move(full_.front());
    full_.pop_front();
    if (seq) *seq = popped_++;
    lock.unlock();
    changed_.notify_all();
    return true;
  }
  void recycle(Batch&& b) {
    b.clear();
    std::lock_guard lock(mutex_);
    free_.push_back(std::move(b));
  }
  void stop() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    changed_.notify_all();
  }

 private:
  std::size_t capacity_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Batch> full_;
  std::vector<Batch> free_;
  bool done_ = false, stop_ = false;
  std::size_t popped_ = 0;
  std::exception_ptr error_;
};

// The reading thread's visitor: copies the calls into batches; the pieces
// too, unless they are views of an input in memory (`source`).
class Batcher : public JsonSplitter::Visitor {
 public:
  Batcher(Channel& channel, std::size_t batch_bytes, const char* source)
      : channel_(channel), batch_bytes_(batch_bytes), source_(source), batch_(channel.take_empty()) {}

  void root_begin(bool array) override { add({CallKind::kRootBegin, array}, {}, {}); }
  void root_end(bool array) override { add({CallKind::kRootEnd, array}, {}, {}); }
  void member(const std::string& key, std::string_view value, std::int64_t offset) override {
    Call c{CallKind::kMember};
    c.offset = offset;
    add(c, value, key);
  }
  void events_begin() override { add({CallKind::kEventsBegin}, {}, {}); }
  void events_end() override { add({CallKind::kEventsEnd}, {}, {}); }
  void event(std::string_view value, std::int64_t offset) override {
    Call c{CallKind::kEvent};
    c.offset = offset;
    add(c, value, {});
  }
  void root_scalar(std::string_view value, std::int64_t offset) override {
    Call c{CallKind::kRootScalar};
    c.offset = offset;
    add(c, value, {});
  }

  void flush() {
    if (!batch_.calls.empty()) channel_.push(std::move(batch_));
    batch_ = Batch{};
  }

 private:
  void add(Call c, std::string_view piece, std::string_view key) {
    const std::size_t weight = piece.size() + key.size();
    if (!batch_.calls.empty() && batch_.weight + weight > batch_bytes_) {
      channel_.push(std::move(batch_));
      batch_ = channel_.take_empty();
    }
    batch_.source = source_;
    const std::size_t copied = source_ ? key.size() : weight;
    if (batch_.text.size() < batch_.used + copied + JsonSplitter::kPadding) {
      const std::size_t room = source_ ? batch_.used + copied : std::max(batch_.used + copied, batch_bytes_);
      batch_.text.resize(room + JsonSplitter::kPadding);
    }
    char* at = batch_.text.data() + batch_.used;
    if (source_) {
      c.pos = piece.empty() ? 0 : static_cast<std::size_t>(piece.data() - source_);
    } else {
      if (!piece.empty()) std::memcpy(at, piece.data(), piece.size());
      at += piece.size();
      c.pos = batch_.used;
      batch_.used += piece.size();
    }
    c.len = piece.size();
    if (!key.empty()) std::memcpy(at, key.data(), key.size());
    c.key_pos = batch_.used;
    c.key_len = key.size();
    batch_.used += key.size();
    batch_.weight += weight;
    batch_.calls.push_back(c);
  }

  Channel& channel_;
  std::size_t batch_bytes_;
  const char* source_;
  Batch batch_;
};

void replay(const Batch& b, JsonSplitter::Visitor& v, std::string& key) {
  const char* text = b.text.data();
  const char* pieces = b.source ? b.source : text;
  for (const auto& c : b.calls) {
    const std::string_view piece(pieces + c.pos, c.len);
    switch (c.kind) {
      case CallKind::kRootBegin: v.root_begin(c.array); break;
      case CallKind::kRootEnd: v.root_end(c.array); break;
      case CallKind::kMember:
        key.assign(text + c.key_pos, c.key_len);
        v.member(key, piece, c.offset);
        break;
      case CallKind::kEventsBegin: v.events_begin(); break;
      case CallKind::kEventsEnd: v.events_end(); break;
      case CallKind::kEvent: v.event(piece, c.offset); break;
      case CallKind::kRootScalar: v.root_scalar(piece, c.offset); break;
    }
  }
}

}  // namespace

ThreadedSplitter::ThreadedSplitter(JsonSplitter::Read read, std::size_t chunk, std::size_t batch_bytes,
                                   std::size_t batches)
    : read_(std::move(read)), chunk_(chunk), batch_bytes_(std::max<std::size_t>(batch_bytes, 1)),
      batches_(std::max<std::size_t>(batches, 1)) {}

ThreadedSplitter::ThreadedSplitter(std::string_view text, std::size_t batch_bytes, std::size_t batches)
    : text_(text), batch_bytes_(std::max<std::size_t>(batch_bytes, 1)), batches_(std::max<std::size_t>(batches, 1)) {}

namespace {

// The reading thread: cuts the input (read, or `text` in memory) into the
// channel's batches.
std::thread start_reader(Channel& channel, const JsonSplitter::Read& read, std::optional<std::string_view> text,
                         std::size_t chunk, std::size_t batch_bytes) {
  return std::thread([&channel, &read, text, chunk, batch_bytes] {
    std::exception_ptr error;
    try {
      Batcher batcher(channel, batch_bytes, text ? text->data() : nullptr);
      JsonSplitter splitter = text ? JsonSplitter(*text) : JsonSplitter(read, chunk);
      try {
        splitter.run(batcher);
      } catch (const Channel::Stopped&) {
        throw;
      } catch (...) {
        error = std::current_exception();
      }
      batcher.flush();  // the calls before an error come first
    } catch (const Channel::Stopped&) {
      // The consumer quit; nobody reads what is left.
    } catch (...) {
      error = std::current_exception();
    }
    channel.finish(error);
  });
}

}  // namespace

void ThreadedSplitter::run(JsonSplitter::Visitor& visitor) {
  Channel channel(batches_);
  std::thread reader = start_reader(channel, read_, text_, chunk_, batch_bytes_);
  struct Join {
    Channel& channel;
    std::thread& thread;
    ~Join() {
      channel.stop();
      thread.join();
    }
  } join{channel, reader};
  Batch batch;
  std::string key;
  while (channel.pop(batch)) {
    replay(batch, visitor, key);
    channel.recycle(std::move(batch));
  }
}

void ThreadedSplitter::run_parallel(std::size_t threads, const BatchWork& work) {
  threads = std::max<std::size_t>(threads, 1);
  // Room for every consumer's batch besides those waiting.
  Channel channel(batches_ + threads);
  std::thread reader = start_reader(channel, read_, text_, chunk_, batch_bytes_);
  std::mutex mutex;  // guards the error
  std::exception_ptr error;
  std::size_t error_seq = 0;
  auto fail = [&](std::size_t seq, std::exception_ptr e) {
    {
      std::lock_guard lock(mutex);
      if (!error || seq < error_seq) {
        error = std::move(e);
        error_seq = seq;
      }
    }
    channel.stop();
  };
  auto consume = [&] {
    Batch batch;
    std::string key;
    std::size_t seq = 0;
    for (;;) {
      try {
        if (!channel.pop(batch, &seq)) return;
      } catch (...) {
        fail(static_cast<std::size_t>(-1), std::current_exception());  // after every batch
        return;
      }
      try {
        work(seq, [&](JsonSplitter::Visitor& v) { replay(batch, v, key); });
      } catch (...) {
        fail(seq, std::current_exception());
        return;
      }
      channel.recycle(std::move(batch));
    }
  };
  std::vector<std::thread> helpers;
  try {
    for (std::size_t i = 1; i < threads; ++i) helpers.emplace_back(consume);
  } catch (...) {
    fail(0, std::current_exception());  // no thread to start: stop the others
  }
  consume();
  for (auto& t : helpers) t.join();
  channel.stop();
  reader.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace moetrace::importers::kineto
