#include "moetrace/schema/op_links.h"

#include <algorithm>
#include <charconv>

namespace moetrace::schema {

namespace {

void append_int(std::string& s, std::int64_t v) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);
  s.append(buf, r.ptr);
}

// A cursor over the JSON text: integers and the punctuation of two levels of
// arrays, nothing else.
class Cursor {
 public:
  explicit Cursor(std::string_view s) : p_(s.data()), end_(s.data() + s.size()) {}
  bool eat(char c) {
    skip();
    if (p_ == end_ || *p_ != c) return false;
    ++p_;
    return true;
  }
  bool integer(std::int64_t& v) {
    skip();
    const auto r = std::from_chars(p_, end_, v);
    if (r.ec != std::errc() || r.ptr == p_) return false;
    p_ = r.ptr;
    return true;
  }
  bool done() {
    skip();
    return p_ == end_;
  }

 private:
  void skip() {
    while (p_ != end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\t' || *p_ == '\r')) ++p_;
  }
  const char* p_;
  const char* end_;
};

// [ item (, item)* ] or [ ]
template <class Item>
bool parse_array(std::string_view json, Item&& item) {
  Cursor c(json);
  if (!c.eat('[')) return false;
  if (!c.eat(']')) {
    do {
      if (!item(c)) return false;
    } while (c.eat(','));
    if (!c.eat(']')) return false;
  }
  return c.done();
}

}  // namespace

std::string encode_deps(std::vector<std::int64_t>& deps) {
  if (deps.empty()) return {};
  std::sort(deps.begin(), deps.end());
  deps.erase(std::unique(deps.begin(), deps.end()), deps.end());
  std::string s = "[";
  for (std::size_t i = 0; i < deps.size(); ++i) {
    if (i) s += ',';
    append_int(s, deps[i]);
  }
  s += ']';
  return s;
}

std::string encode_buffers(std::vector<BufferLink>& links) {
  if (links.empty()) return {};
  std::sort(links.begin(), links.end());
  std::size_t out = 0;
  for (std::size_t i = 0; i < links.size(); ++i) {
    if (out > 0 && links[out - 1].buffer == links[i].buffer) links[out - 1].access |= links[i].access;
    else links[out++] = links[i];
  }
  links.resize(out);
  std::string s = "[";
  for (std::size_t i = 0; i < links.size(); ++i) {
    s += i ? ",[" : "[";
    append_int(s, links[i].buffer);
    s += ',';
    append_int(s, links[i].access);
    s += ']';
  }
  s += ']';
  return s;
}

bool parse_deps(std::string_view json, std::vector<std::int64_t>& out) {
  return parse_array(json, [&](Cursor& c) {
    std::int64_t v = 0;
    if (!c.integer(v)) return false;
    out.push_back(v);
    return true;
  });
}

bool parse_buffers(std::string_view json, std::vector<BufferLink>& out) {
  return parse_array(json, [&](Cursor& c) {
    BufferLink l;
    std::int64_t access = 0;
    if (!c.eat('[') || !c.integer(l.buffer) || !c.eat(',') || !c.integer(access) || !c.eat(']')) return false;
    if (access < 1 || access > 3) return false;
    l.access = static_cast<std::int32_t>(access);
    out.push_back(l);
    return true;
  });
}

}  // namespace moetrace::schema
