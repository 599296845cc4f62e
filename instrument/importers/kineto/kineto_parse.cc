// The parse of one PyTorch-profiler (Kineto) Chrome-trace JSON file into
// compact records (kineto_records.h).
//
// Facts about the format this relies on (checked on the HolisticTraceAnalysis
// test traces, see tests/importers/kineto_importer_test.cc):
// - `ts`/`dur` are microseconds, fractional; with `baseTimeNanoseconds` at the
//   top level, ts counts from that base (absolute ns = base + ts * 1000);
// - GPU events have pid = device and tid = stream (args.device, args.stream);
//   kernels, copies and memsets carry args.correlation, the id of the
//   cuda_runtime call that launched them; `ac2g` flows (id = correlation id)
//   link the same two events and stand in where args.correlation is missing;
// - NCCL kernels (ncclKernel_*, ncclDevKernel_*) carry "Collective name",
//   "In/Out msg nelems", "Group size", "dtype", "Process Group *" args;
// - `distributedInfo` (rank, world_size), `deviceProperties` and
//   `baseTimeNanoseconds` may come before or after `traceEvents`; read_tail
//   reads them from the file's end ahead of the parse, so that the records
//   can be written while the file is parsed (kineto_importer.cc checks that
//   guess against the parse).
//
// The file is streamed: on a thread of its own, GzipInput reads (inflates) it
// and JsonSplitter cuts it into the top-level members and batches of events;
// parsing threads parse each event with simdjson and Replay feeds it as SAX
// events to a Handler of their own, into the batch's compact records, so a
// 1 GB trace never becomes a DOM. The batches are appended in input order
// (through the BatchSink, which writes what it can at once).
#include "kineto_records.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cctype>
#include <charconv>
#include <fstream>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include <simdjson.h>

#include "../common/trace_builder.h"
#include "gzip_input.h"
#include "json_splitter.h"
#include "kineto_handler.h"
#include "kineto_importer.h"
#include "moetrace/schema/error.h"

namespace moetrace::importers::kineto {

using namespace std::string_view_literals;

namespace {

// Parses the pieces JsonSplitter cuts with simdjson and replays them into the
// Handler, with the events of the containers around them.
class Replay : public JsonSplitter::Visitor {
 public:
  explicit Replay(Handler& handler) : h_(handler) {}

  void root_begin(bool array) override {
    if (array) h_.start_array(kUnknownSize);
    else h_.start_object(kUnknownSize);
  }
  void root_end(bool array) override {
    if (array) h_.end_array();
    else h_.end_object();
  }
  void member(const std::string& key, std::string_view value, std::int64_t offset) override {
    h_.key(key);
    piece(value, offset);
  }
  void events_begin() override {
    h_.key("traceEvents");
    h_.start_array(kUnknownSize);
  }
  void events_end() override { h_.end_array(); }
  void event(std::string_view value, std::int64_t offset) override { piece(value, offset); }
  void root_scalar(std::string_view value, std::int64_t offset) override { piece(value, offset); }

 private:
  static constexpr std::size_t kUnknownSize = static_cast<std::size_t>(-1);
  static_assert(simdjson::SIMDJSON_PADDING <= JsonSplitter::kPadding);

  // A simdjson error, at the byte where the parser stopped where it says,
  // else at the start of the piece.
  [[noreturn]] static void fail(simdjson::error_code e, std::int64_t offset, std::string_view text,
                                simdjson::ondemand::document* doc) {
    std::string what = simdjson::error_message(e);
    if (!what.empty() && what.back() == '.') what.pop_back();
    const char* at = nullptr;
    if (doc && !doc->current_location().get(at) && at >= text.data() && at < text.data() + text.size())
      throw JsonSplitError(offset + (at - text.data()) + 1, what);
    throw JsonSplitError(offset + 1, what + " (in the value starting there)");
  }

  void piece(std::string_view text, std::int64_t offset) {
    end_ = text.data() + text.size();
    simdjson::ondemand::document doc;
    if (auto e = parser_.iterate(text.data(), text.size(), text.size() + JsonSplitter::kPadding).get(doc))
      fail(e, offset, text, nullptr);
    // JsonSplitter cut exactly one value, so nothing can follow it.
    if (auto e = document(doc)) fail(e, offset, text, &doc);
  }

  simdjson::error_code document(simdjson::ondemand::document& doc) {
    bool scalar = false;
    if (auto e = doc.is_scalar().get(scalar)) return e;
    if (!scalar) {
      simdjson::ondemand::value v;
      if (auto e = doc.get_value().get(v)) return e;
      return value(v);
    }
    return scalar_value(doc);
  }

  template <typename V>
  simdjson::error_code scalar_value(V& v) {
    simdjson::ondemand::json_type type;
    if (auto e = v.type().get(type)) return e;
    switch (type) {
      case simdjson::ondemand::json_type::string: {
        std::string_view s;
        if (!plain_string(v, s))
          if (auto e = v.get_string().get(s)) return e;
        h_.string(s);
        return simdjson::SUCCESS;
      }
      case simdjson::ondemand::json_type::number: return number(v);
      case simdjson::ondemand::json_type::boolean: {
        bool b = false;
        if (v.get_bool().get(b)) {  // "tru", "fals"
          std::string_view raw;
          return !raw_token(v, raw) && !raw.empty() && raw[0] == 'f' ? simdjson::F_ATOM_ERROR : simdjson::T_ATOM_ERROR;
        }
        h_.boolean(b);
        return simdjson::SUCCESS;
      }
      case simdjson::ondemand::json_type::null: {
        bool null = false;
        if (v.is_null().get(null) || !null) return simdjson::N_ATOM_ERROR;  // "nul"
        h_.null();
        return simdjson::SUCCESS;
      }
      default: return simdjson::INCORRECT_TYPE;
    }
  }

  // A string value without escapes, read where it stands: most are (names,
  // categories), and unescaping each into simdjson's string buffer cost
  // more than reading it (BENCHMARKS.md). False where it must be unescaped
  // (the value is then still unread) or is the document itself.
  static bool plain_string(simdjson::ondemand::value& v, std::string_view& s) {
    std::string_view raw;  // the quoted text
    raw_token(v, raw);
    if (raw.size() < 2 || raw.front() != '"' || raw.back() != '"') return false;
    raw = raw.substr(1, raw.size() - 2);
    if (raw.size() < 16) {  // a call to memchr costs more than a short loop
      for (const char c : raw)
        if (c == '\\') return false;
    } else if (std::memchr(raw.data(), '\\', raw.size()) != nullptr) {
      return false;
    }
    s = raw;
    return true;
  }
  static bool plain_string(simdjson::ondemand::document&, std::string_view&) { return false; }

  // A member's name without escapes, read where it stands (simdjson's
  // unescaped_key() copied every name into its string buffer: 5 % of a
  // parse); one with escapes is unescaped by simdjson.
  simdjson::error_code member_name(simdjson::ondemand::field& field, std::string_view& name) {
    const char* const start = field.key().raw();
    for (const char* p = start; p < end_; ++p) {  // names are short: no memchr
      if (*p == '"') {
        name = std::string_view(start, static_cast<std::size_t>(p - start));
        return simdjson::SUCCESS;
      }
      if (*p == '\\') break;
    }
    return field.unescaped_key().get(name);
  }

  // A value's text as it stands, without the spaces simdjson's
  // raw_json_token() keeps after it.
  static std::string_view trimmed(std::string_view raw) {
    while (!raw.empty() && (raw.back() == ' ' || raw.back() == '\n' || raw.back() == '\r' || raw.back() == '\t'))
      raw.remove_suffix(1);
    return raw;
  }
  static simdjson::error_code raw_token(simdjson::ondemand::value& v, std::string_view& raw) {
    raw = trimmed(v.raw_json_token());
    return simdjson::SUCCESS;
  }
  static simdjson::error_code raw_token(simdjson::ondemand::document& d, std::string_view& raw) {
    if (auto e = d.raw_json_token().get(raw)) return e;
    raw = trimmed(raw);
    return simdjson::SUCCESS;
  }

  template <typename V>
  simdjson::error_code number(V& v) {
    std::string_view raw;  // before get_number(), which consumes the value
    if (auto e = raw_token(v, raw)) return e;
    simdjson::ondemand::number num;
    auto e = v.get_number().get(num);
    if (!e) {
      switch (num.get_number_type()) {
        case simdjson::ondemand::number_type::signed_integer: h_.number_integer(num.get_int64()); break;
        case simdjson::ondemand::number_type::unsigned_integer: h_.number_unsigned(num.get_uint64()); break;
        case simdjson::ondemand::number_type::floating_point_number: h_.number_float(num.get_double(), raw); break;
      }
      return simdjson::SUCCESS;
    }
    // An integer too big for 64 bits: a float, as nlohmann::json had it.
    if (e != simdjson::NUMBER_ERROR || raw.empty() || raw.find_first_not_of("-0123456789") != std::string_view::npos)
      return e;
    text_.assign(raw);
    h_.number_float(std::strtod(text_.c_str(), nullptr), raw);
    return simdjson::SUCCESS;
  }

  simdjson::error_code value(simdjson::ondemand::value& v) {
    simdjson::ondemand::json_type type;
    if (auto e = v.type().get(type)) return e;
    if (type == simdjson::ondemand::json_type::object) {
      simdjson::ondemand::object object;
      if (auto e = v.get_object().get(object)) return e;
      h_.start_object(kUnknownSize);
      for (auto member : object) {
        if (auto e = member.error()) return e;
        simdjson::ondemand::field& field = member.value_unsafe();
        std::string_view key;
        if (auto e = member_name(field, key)) return e;
        h_.key(key);
        if (!h_.wants_value()) continue;  // simdjson steps over the value
        if (auto e = value(field.value())) return e;
      }
      h_.end_object();
      return simdjson::SUCCESS;
    }
    if (type == simdjson::ondemand::json_type::array) {
      simdjson::ondemand::array array;
      if (auto e = v.get_array().get(array)) return e;
      h_.start_array(kUnknownSize);
      for (auto element : array) {
        if (auto e = element.error()) return e;
        if (auto e = value(element.value_unsafe())) return e;
      }
      h_.end_array();
      return simdjson::SUCCESS;
    }
    return scalar_value(v);
  }

  Handler& h_;
  simdjson::ondemand::parser parser_;
  std::string text_;
  const char* end_ = nullptr;  // the end of the piece being read
};


// A call other than an event, kept by a parsing thread for the file's own
// handler (the top-level members, the root's and traceEvents' brackets).
struct Deferred {
  enum class Kind : std::uint8_t { kRootBegin, kRootEnd, kMember, kEventsBegin, kEventsEnd, kRootScalar };
  Kind kind;
  bool array = false;
  std::string key;
  std::vector<char> text;  // the piece, then JsonSplitter::kPadding bytes for simdjson
  std::size_t length = 0;
  std::int64_t offset = 0;
  std::string_view piece() const { return {text.data(), length}; }
};

// One batch of the input as a parsing thread read it: its events' records
// and the other calls, in order, up to its first bad event (error).
struct Part {
  ParsedFile events;
  std::vector<Deferred> calls;
  std::exception_ptr error;  // the calls after it were not read, as a serial parse stops there
};

struct StopBatch {};

// A parsing thread's visitor of one batch.
class PartReader : public JsonSplitter::Visitor {
 public:
  PartReader(Part& part, Replay& events) : part_(part), events_(events) {}

  void root_begin(bool array) override { defer(Deferred::Kind::kRootBegin, array, {}, {}, 0); }
  void root_end(bool array) override { defer(Deferred::Kind::kRootEnd, array, {}, {}, 0); }
  void member(const std::string& key, std::string_view value, std::int64_t offset) override {
    defer(Deferred::Kind::kMember, false, key, value, offset);
  }
  void events_begin() override { defer(Deferred::Kind::kEventsBegin, false, {}, {}, 0); }
  void events_end() override { defer(Deferred::Kind::kEventsEnd, false, {}, {}, 0); }
  void root_scalar(std::string_view value, std::int64_t offset) override {
    defer(Deferred::Kind::kRootScalar, false, {}, value, offset);
  }
  void event(std::string_view value, std::int64_t offset) override {
    try {
      events_.event(value, offset);
    } catch (...) {
      part_.error = std::current_exception();
      throw StopBatch{};
    }
  }

 private:
  void defer(Deferred::Kind kind, bool array, std::string_view key, std::string_view piece, std::int64_t offset) {
    Deferred d{.kind = kind, .array = array, .key = std::string(key),
               .text = std::vector<char>(piece.size() + JsonSplitter::kPadding), .length = piece.size(),
               .offset = offset};
    std::copy(piece.begin(), piece.end(), d.text.begin());
    part_.calls.push_back(std::move(d));
  }

  Part& part_;
  Replay& events_;
};

void replay_deferred(const Deferred& d, JsonSplitter::Visitor& v) {
  switch (d.kind) {
    case Deferred::Kind::kRootBegin: v.root_begin(d.array); break;
    case Deferred::Kind::kRootEnd: v.root_end(d.array); break;
    case Deferred::Kind::kMember: v.member(d.key, d.piece(), d.offset); break;
    case Deferred::Kind::kEventsBegin: v.events_begin(); break;
    case Deferred::Kind::kEventsEnd: v.events_end(); break;
    case Deferred::Kind::kRootScalar: v.root_scalar(d.piece(), d.offset); break;
  }
}

// Renumbers a batch's string ids into the file's.
void renumber_strings(ParsedFile& out, ParsedFile& part) {
  std::vector<std::int32_t> ids(part.strings.size());
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = out.intern(part.strings[i]);
  auto renumber = [&ids](std::int32_t& s) {
    if (s >= 0) s = ids[static_cast<std::size_t>(s)];
  };
  for (auto& a : part.gpu) renumber(a.name);
  for (auto& r : part.ranges) {
    renumber(r.name);
    renumber(r.domain);  // -1 and -2 are not string ids
  }
  for (auto& a : part.api) renumber(a.name);
  for (auto& o : part.ops) renumber(o.name);
  part.strings.clear();
  part.string_index.clear();
}

// Appends a batch's records (string ids already the file's) to the file's,
// in input order, collective indices renumbered into the file's.
void append(ParsedFile& out, ParsedFile&& part) {
  const auto collectives = static_cast<std::int32_t>(out.collectives.size());
  for (auto& a : part.gpu)
    if (a.collective >= 0) a.collective += collectives;
  auto move_into = [](auto& to, auto& from) {
    // The part's array itself where `to` holds nothing and has no more room
    // (no copy); else appended (room reserved ahead is kept).
    if (to.empty() && to.capacity() <= from.capacity()) to = std::move(from);
    else to.insert(to.end(), std::make_move_iterator(from.begin()), std::make_move_iterator(from.end()));
  };
  move_into(out.gpu, part.gpu);
  move_into(out.ranges, part.ranges);
  move_into(out.api, part.api);
  move_into(out.memory, part.memory);
  move_into(out.syncs, part.syncs);
  move_into(out.collectives, part.collectives);
  move_into(out.ops, part.ops);
  move_into(out.flows, part.flows);
  for (const auto& [reason, n] : part.skipped) out.skipped[reason] += n;
}

// Threads that parse events: the machine's cores, at most 4 (beyond that
// the reading thread, which reads, inflates and cuts at about 1 GB/s, is the
// bottleneck; BENCHMARKS.md).
std::size_t parse_threads(int asked) {
  if (asked > 0) return static_cast<std::size_t>(asked);
  const unsigned n = std::thread::hardware_concurrency();
  return std::clamp<std::size_t>(n == 0 ? 1 : n, 1, 4);
}

}  // namespace

// The events are parsed on several threads, a batch at a time (each into a
// Part of its own), and appended in input order; the top-level members go to
// the file's own handler in order too. The records are those of a parse on
// one thread, in the same order.
ParsedFile parse(const std::string& path, TraceBuilder& builder, int threads, BatchSink* sink,
                 std::optional<Bytes> text) {
  ParsedFile out;
  GzipInput input = text ? GzipInput(path, std::move(*text)) : GzipInput(path);
  const std::string label = file_name(path);
  Handler handler(out, input, builder, label);
  Replay replay(handler);

  struct Worker {
    ParsedFile unused;
    Handler handler;
    Replay replay;
    // The records of the last batch this worker parsed: the next one's room,
    // a quarter more, reserved at once (batches of one file hold much the
    // same). Grown record by record, a batch's arrays were copied at every
    // doubling, each time into fresh memory: 5-6 % of importing
    // hta-nccl_data (9.8 MB, 39 batches; perf record).
    std::size_t ranges = 0, gpu = 0, api = 0;
    Worker(GzipInput& in, TraceBuilder& b, const std::string& label) : handler(unused, in, b, label), replay(handler) {}
    void reserve(ParsedFile& part) const {
      part.ranges.reserve(ranges + ranges / 4);
      part.gpu.reserve(gpu + gpu / 4);
      part.api.reserve(api + api / 4);
    }
    void seen(const ParsedFile& part) {
      ranges = part.ranges.size();
      gpu = part.gpu.size();
      api = part.api.size();
    }
  };
  std::mutex mutex;  // guards idle, ready, next, appending
  std::vector<std::unique_ptr<Worker>> idle;
  std::map<std::size_t, Part> ready;  // parsed, waiting for the batches before them
  std::size_t next = 0;               // the batch to append next
  bool appending = false;             // a thread is appending (the others leave it to that one)
  std::size_t appended = 0;

  auto work = [&](std::size_t seq, const ThreadedSplitter::Replayer& replay_batch) {
    std::unique_ptr<Worker> w;
    {
      std::lock_guard lock(mutex);
      if (!idle.empty()) {
        w = std::move(idle.back());
        idle.pop_back();
      }
    }
    if (!w) w = std::make_unique<Worker>(input, builder, label);
    Part part;
    w->reserve(part.events);
    w->handler.events_into(part.events);
    PartReader reader(part, w->replay);
    try {
      replay_batch(reader);
    } catch (const StopBatch&) {
    }
    w->seen(part.events);
    std::unique_lock lock(mutex);
    idle.push_back(std::move(w));
    ready.emplace(seq, std::move(part));
    if (appending) return;
    appending = true;
    try {
      while (!ready.empty() && ready.begin()->first == next) {
        Part p = std::move(ready.begin()->second);
        ready.erase(ready.begin());
        ++next;
        lock.unlock();
        for (const auto& c : p.calls) replay_deferred(c, replay);
        renumber_strings(out, p.events);
        if (sink) sink->take(out, p.events);
        append(out, std::move(p.events));
        if (p.error) std::rethrow_exception(p.error);
        if ((++appended & 0x7) == 0) builder.progress("reading " + label, input.fraction());
        lock.lock();
      }
    } catch (...) {
      if (!lock.owns_lock()) lock.lock();
      appending = false;
      throw;
    }
    appending = false;
  };
  // Reading, decompressing and cutting run on a thread of their own, in
  // batches of 256 KiB: small enough that the parsing threads start early on
  // a file of a few MB (7 % of a 9.8 MB import against 1 MiB batches), large
  // enough that handing them over costs nothing on a large one.
  // A small file inflated whole is cut in place: its pieces are views of
  // the text, not copied into the batches.
  const auto text_in_memory = input.take_text();
  if (text_in_memory) {
    const auto most = most_events(text_in_memory->size());
    out.ranges.reserve(most);
    builder.expect_events(most);
  }
  ThreadedSplitter splitter =
      text_in_memory ? ThreadedSplitter(*text_in_memory, std::size_t{1} << 18)
                     : ThreadedSplitter([&input](char* dst, std::size_t n) { return input.read(dst, n); },
                                        std::size_t{1} << 18, std::size_t{1} << 18);
  try {
    splitter.run_parallel(parse_threads(threads), work);
  } catch (const JsonSplitError& e) {
    if (input.bytes_out() == 0) throw Error(path + ": empty file, not a Chrome/Kineto trace");
    throw Error(path + ": invalid JSON at byte " + std::to_string(e.byte()) + ": " + e.what());
  }
  if (!out.has_trace_events)
    throw Error(path + ": JSON without traceEvents, not a Chrome/Kineto trace");
  return out;
}

namespace {

// The start of the last `needle` in `text`, npos where none: Boyer-Moore-
// Horspool over the reversed text. (string_view::rfind compares at every
// position, a memcmp call a byte: over a 1 MiB tail without the key, 10 % of
// a small trace's import and report.)
std::size_t last_occurrence(std::string_view text, std::string_view needle) {
  if (needle.empty() || needle.size() > text.size()) return std::string_view::npos;
  const std::boyer_moore_horspool_searcher search(needle.rbegin(), needle.rend());
  const auto [first, last] = search(text.rbegin(), text.rend());
  if (first == text.rend()) return std::string_view::npos;
  return static_cast<std::size_t>(last.base() - text.begin());
}

// Where the value of the last `"key": value` in `text` lies, [start, end):
// an integer's digits, or an object or array up to its closing bracket
// (brackets inside strings skipped); npos where the key, its colon or the
// value's end is missing.
std::pair<std::size_t, std::size_t> last_member_value(std::string_view text, std::string_view quoted_key) {
  constexpr auto kNone = std::string_view::npos;
  const std::size_t at = last_occurrence(text, quoted_key);
  if (at == kNone) return {kNone, kNone};
  std::size_t i = text.find_first_not_of(" \t\r\n", at + quoted_key.size());
  if (i == kNone || text[i] != ':') return {kNone, kNone};
  i = text.find_first_not_of(" \t\r\n", i + 1);
  if (i == kNone) return {kNone, kNone};
  if (text[i] != '{') {
    std::size_t end = i;
    while (end < text.size() && (text[end] == '-' || (text[end] >= '0' && text[end] <= '9'))) ++end;
    return {i, end};
  }
  int depth = 0;
  bool in_string = false;
  for (std::size_t j = i; j < text.size(); ++j) {
    const char c = text[j];
    if (in_string) {
      if (c == '\\') ++j;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if ((c == '}' || c == ']') && --depth == 0) {
      return {i, j + 1};
    }
  }
  return {kNone, kNone};
}

// The last bytes read_tail reads (below).
constexpr std::size_t kTail = std::size_t{1} << 20;

}  // namespace

std::optional<Tail> read_tail(const std::string& path) {
  // The members after traceEvents: traceName, displayTimeUnit,
  // baseTimeNanoseconds (a few hundred bytes), at times distributedInfo,
  // whose pg_config lists each process group's ranks (some KB a group in a
  // run of a thousand ranks). 1 MiB holds them with room to spare; where it
  // does not, the guess fails its check and the file is imported again.
  std::string text;
  try {
    GzipInput in(path);
    if (!in.compressed()) {
      std::ifstream file(path, std::ios::binary | std::ios::ate);
      const std::streamoff size = file.tellg();
      if (!file || size < 0) return std::nullopt;
      const std::streamoff length = std::min<std::streamoff>(size, kTail);
      text.resize(static_cast<std::size_t>(length));
      file.seekg(size - length);
      if (!file.read(text.data(), length)) return std::nullopt;
    } else {
      // Inflated once ahead of the parse, keeping the last 1 MiB (igzip:
      // 0.1 s for 200 MB of JSON, BENCHMARKS.md). Not zeroed: a small
      // file's inflation touches a few of its pages, and zeroing all 5 MiB
      // cost a small import about a millisecond of page faults.
      constexpr std::size_t kBuffer = kTail + (std::size_t{4} << 20);
      const std::unique_ptr<char[]> buf(new char[kBuffer]);
      std::size_t kept = 0;
      while (const std::size_t got = in.read(buf.get() + kept, kBuffer - kept)) {
        kept += got;
        if (kept > kTail) {
          std::memmove(buf.get(), buf.get() + kept - kTail, kTail);
          kept = kTail;
        }
      }
      text.assign(buf.get(), kept);
    }
  } catch (const std::exception&) {
    return std::nullopt;  // the parse reports what is wrong with the file
  }
  return tail_of(text);
}

Tail tail_of(std::string_view text) {
  if (text.size() > kTail) text.remove_prefix(text.size() - kTail);
  Tail tail;
  if (auto [b, e] = last_member_value(text, "\"baseTimeNanoseconds\""); b != std::string_view::npos) {
    std::int64_t base = 0;
    const auto r = std::from_chars(text.data() + b, text.data() + e, base);
    if (r.ec == std::errc() && r.ptr == text.data() + e) tail.base_time_ns = base;
  }
  if (auto [b, e] = last_member_value(text, "\"distributedInfo\""); b != std::string_view::npos) {
    simdjson::dom::parser parser;
    simdjson::dom::element info;
    std::int64_t rank = 0;
    if (!parser.parse(text.data() + b, e - b).get(info) && !info["rank"].get_int64().get(rank)) tail.rank = rank;
  }
  return tail;
}

}  // namespace moetrace::importers::kineto
