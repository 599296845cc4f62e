#include "json_splitter.h"

#include <array>
#include <cstring>
#include <utility>

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
}

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
  return static_cast<unsigned char>(buf_[pos_]);
}

int JsonSplitter::peek_non_ws() {
  for (;;) {
    while (pos_ < end_ && is_ws(buf_[pos_])) ++pos_;
    if (pos_ < end_) return static_cast<unsigned char>(buf_[pos_]);
    if (!fill()) return -1;
  }
}

void JsonSplitter::fail(const std::string& what) const { throw JsonSplitError(offset() + 1, what); }

void JsonSplitter::fail_eof() const {
  throw JsonSplitError(bytes_read() + 1, "unexpected end of input (truncated file?)");
}

void JsonSplitter::scan_string() {
  for (;;) {
    const char* const data = buf_.data();
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
    const char* const data = buf_.data();
    std::size_t p = pos_;
#if defined(__SSE2__)
    // 16 bytes at a time: a bit per quote, backslash and bracket, handled in
    // order; runs of other bytes cost one compare each 16 bytes.
    const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\'), lower = _mm_set1_epi8(0x20);
    const __m128i open = _mm_set1_epi8('{'), close = _mm_set1_epi8('}');  // '[' | 0x20 == '{', ']' | 0x20 == '}'
    while (p + 16 <= end_) {
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
    while (pos_ < end_ && !kScalarEnd[static_cast<unsigned char>(buf_[pos_])]) ++pos_;
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
  std::string_view text(buf_.data() + mark_, pos_ - mark_);
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
    c = peek_non_ws();
    if (c < 0) fail_eof();
    ++pos_;
    if (c == ']') return;
    if (c != ',') {
      --pos_;
      fail("expected ',' or ']' after an array element, not " + describe(c));
    }
    c = peek_non_ws();
  }
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
        const std::string_view raw(buf_.data() + mark_ + 1, pos_ - mark_ - 2);
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
        c = peek_non_ws();
        if (c < 0) fail_eof();
        ++pos_;
        if (c == '}') break;
        if (c != ',') {
          --pos_;
          fail("expected ',' or '}' after an object member, not " + describe(c));
        }
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

}  // namespace moetrace::importers::kineto
