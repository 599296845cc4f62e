// JsonSplitter (the streaming cutter in front of the Kineto importer's
// simdjson parsing) on hand-made JSON, read in chunks as small as one byte.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <thread>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kineto/json_splitter.h"

namespace moetrace::testing {
namespace {

using importers::kineto::JsonSplitError;
using importers::kineto::JsonSplitter;
using importers::kineto::unescape_json_string;

// Records what the splitter hands over, as one line per call.
struct Recorder : JsonSplitter::Visitor {
  std::vector<std::string> calls;
  void root_begin(bool array) override { calls.push_back(array ? "[" : "{"); }
  void root_end(bool array) override { calls.push_back(array ? "]" : "}"); }
  void member(const std::string& key, std::string_view value, std::int64_t offset) override {
    check_padding(value);
    calls.push_back("member " + key + " @" + std::to_string(offset) + " " + std::string(value));
  }
  void events_begin() override { calls.push_back("events ["); }
  void events_end() override { calls.push_back("events ]"); }
  void event(std::string_view value, std::int64_t offset) override {
    check_padding(value);
    calls.push_back("event @" + std::to_string(offset) + " " + std::string(value));
  }
  void root_scalar(std::string_view value, std::int64_t) override {
    calls.push_back("scalar " + std::string(value));
  }
  // The padding after a piece must be readable (ASan/valgrind would notice).
  static void check_padding(std::string_view v) {
    volatile char sink = 0;
    for (std::size_t i = 0; i < JsonSplitter::kPadding; ++i) sink = sink ^ v.data()[v.size() + i];
  }
};

// Reads `text`, at most `chunk` bytes a call.
JsonSplitter::Read reader(const std::string& text, std::shared_ptr<std::size_t> at = std::make_shared<std::size_t>(0)) {
  return [&text, at](char* dst, std::size_t n) {
    n = std::min(n, text.size() - *at);
    std::memcpy(dst, text.data() + *at, n);
    *at += n;
    return n;
  };
}

// Splits `text`, read `chunk` bytes at a time.
std::vector<std::string> split(const std::string& text, std::size_t chunk) {
  std::size_t at = 0;
  JsonSplitter splitter(
      [&](char* dst, std::size_t n) {
        n = std::min(n, text.size() - at);
        std::memcpy(dst, text.data() + at, n);
        at += n;
        return n;
      },
      chunk);
  Recorder r;
  splitter.run(r);
  EXPECT_EQ(splitter.bytes_read(), static_cast<std::int64_t>(text.size()));
  return r.calls;
}

// `text` in memory as the in-place splitter takes it: kPadding readable
// bytes after its end (reserved, not part of it).
importers::kineto::Bytes padded(const std::string& text) {
  importers::kineto::Bytes b;
  b.reserve(text.size() + JsonSplitter::kPadding);
  b.assign(text.begin(), text.end());
  return b;
}

// A Recorder that also checks each piece is a view of `text`, not a copy.
struct ViewRecorder : Recorder {
  std::string_view text;
  explicit ViewRecorder(std::string_view t) : text(t) {}
  void member(const std::string& key, std::string_view value, std::int64_t offset) override {
    expect_view(value);
    Recorder::member(key, value, offset);
  }
  void event(std::string_view value, std::int64_t offset) override {
    expect_view(value);
    Recorder::event(value, offset);
  }
  void expect_view(std::string_view v) const {
    EXPECT_TRUE(v.data() >= text.data() && v.data() + v.size() <= text.data() + text.size()) << v;
  }
};

// Splits `text` held in memory, in place.
std::vector<std::string> split_in_place(const std::string& text) {
  const auto b = padded(text);
  JsonSplitter splitter(importers::kineto::view(b));
  ViewRecorder r(importers::kineto::view(b));
  splitter.run(r);
  EXPECT_EQ(splitter.bytes_read(), static_cast<std::int64_t>(text.size()));
  return r.calls;
}

// The same calls for every chunk size from 1 to 40 bytes and a large one,
// and in place.
std::vector<std::string> split_all_chunks(const std::string& text) {
  const auto expected = split(text, 1 << 16);
  for (std::size_t chunk = 1; chunk <= 40; ++chunk) EXPECT_EQ(split(text, chunk), expected) << "chunk " << chunk;
  EXPECT_EQ(split_in_place(text), expected) << "in place";
  return expected;
}

template <class Split>
std::string error_message(Split&& split_it) {
  try {
    split_it();
  } catch (const JsonSplitError& e) {
    return "byte " + std::to_string(e.byte()) + ": " + e.what();
  }
  return "no error";
}

// The error of splitting `text` read `chunk` bytes at a time, which must be
// the in-place split's too.
std::string error_of(const std::string& text, std::size_t chunk = 7) {
  const auto streamed = error_message([&] { split(text, chunk); });
  EXPECT_EQ(error_message([&] { split_in_place(text); }), streamed) << "in place: " << text;
  return streamed;
}

// The calls the plain splitter makes on `bad` before its error.
std::vector<std::string> calls_before_the_error(const std::string& bad) {
  Recorder plain;
  JsonSplitter splitter(reader(bad), 64);
  EXPECT_THROW(splitter.run(plain), JsonSplitError);
  return plain.calls;
}

// `e` is the error the plain splitter reports for `bad`.
void expect_the_plain_error(const JsonSplitError& e, const std::string& bad) {
  EXPECT_EQ("byte " + std::to_string(e.byte()) + ": " + e.what(), error_of(bad));
}

TEST(JsonSplitter, MembersAndEvents) {
  const std::string text =
      "{\"schemaVersion\": 1, \"deviceProperties\": [{\"id\": 0, \"name\": \"H100\"}],\n"
      " \"traceEvents\": [{\"ph\": \"X\", \"ts\": 1.5}, {\"ph\": \"i\"} ],\n"
      " \"baseTimeNanoseconds\": 1700000000000000000}";
  const std::vector<std::string> expected = {
      "{",
      "member schemaVersion @18 1",
      "member deviceProperties @41 [{\"id\": 0, \"name\": \"H100\"}]",
      "events [",
      "event @87 {\"ph\": \"X\", \"ts\": 1.5}",
      "event @111 {\"ph\": \"i\"}",
      "events ]",
      "member baseTimeNanoseconds @150 1700000000000000000",
      "}",
  };
  EXPECT_EQ(split_all_chunks(text), expected);
}

TEST(JsonSplitter, StringsWithBracketsQuotesAndBackslashes) {
  const std::string e1 = R"({"name": "a]}[{,\"q\" \\", "args": {"s": "\\\\"}})";
  const std::string e2 = R"({"name": "\\\"}]"})";
  const std::string text = "{\"traceEvents\": [" + e1 + "," + e2 + "]}";
  const auto calls = split_all_chunks(text);
  ASSERT_EQ(calls.size(), 6u);
  EXPECT_EQ(calls[2], "event @17 " + e1);
  EXPECT_EQ(calls[3], "event @" + std::to_string(18 + e1.size()) + " " + e2);
}

TEST(JsonSplitter, NestedArraysAndWhitespace) {
  const std::string e1 = "{\"args\": {\"grid\": [1, [2, [3]], {\"x\": [[]]}], \"block\": [4,5,6]}}";
  const std::string text = " \n\t{ \r\n \"traceEvents\" \n : \n [ \n " + e1 + " \n , \n 7 \n , \"s\" , true ] \n } \n\n";
  const auto calls = split_all_chunks(text);
  ASSERT_EQ(calls.size(), 8u);
  EXPECT_EQ(calls[2].substr(calls[2].find(' ', 7) + 1), e1);
  EXPECT_EQ(calls[3].substr(calls[3].find(' ', 7) + 1), "7");
  EXPECT_EQ(calls[4].substr(calls[4].find(' ', 7) + 1), "\"s\"");
  EXPECT_EQ(calls[5].substr(calls[5].find(' ', 7) + 1), "true");
}

TEST(JsonSplitter, BareArrayEmptyContainersAndScalars) {
  EXPECT_EQ(split_all_chunks("[{\"a\": 1}, {}]"),
            (std::vector<std::string>{"[", "event @1 {\"a\": 1}", "event @11 {}", "]"}));
  EXPECT_EQ(split_all_chunks("[]"), (std::vector<std::string>{"[", "]"}));
  EXPECT_EQ(split_all_chunks("{}"), (std::vector<std::string>{"{", "}"}));
  EXPECT_EQ(split_all_chunks("{\"traceEvents\": []}"), (std::vector<std::string>{"{", "events [", "events ]", "}"}));
  // traceEvents that is not an array is an ordinary member.
  EXPECT_EQ(split_all_chunks("{\"traceEvents\": {\"a\": []}}"),
            (std::vector<std::string>{"{", "member traceEvents @16 {\"a\": []}", "}"}));
  EXPECT_EQ(split_all_chunks(" 42 "), (std::vector<std::string>{"scalar 42"}));
  // Escaped member names are compared unescaped.
  EXPECT_EQ(split_all_chunks("{\"trace\\u0045vents\": [1]}"),
            (std::vector<std::string>{"{", "events [", "event @22 1", "events ]", "}"}));
}

TEST(JsonSplitter, LargePieceAcrossManyChunks) {
  std::string name(100000, 'x');
  name[5000] = '[';
  name[7000] = '"';  // escaped below
  std::string escaped;
  for (char c : name) escaped += c == '"' ? std::string("\\\"") : std::string(1, c);
  const std::string event = "{\"name\": \"" + escaped + "\", \"args\": {\"a\": [[1], [2]]}}";
  const std::string text = "{\"traceEvents\": [" + event + ", " + event + "]}";
  for (std::size_t chunk : {std::size_t{7}, std::size_t{4096}, std::size_t{1} << 20}) {
    const auto calls = split(text, chunk);
    ASSERT_EQ(calls.size(), 6u);
    EXPECT_EQ(calls[2], "event @17 " + event);
    EXPECT_EQ(calls[3], "event @" + std::to_string(19 + event.size()) + " " + event);
  }
}

// Random events whose strings are full of quotes, backslashes and brackets,
// so escapes fall on every position of the splitter's 16-byte blocks.
TEST(JsonSplitter, RandomEscapesAtEveryAlignment) {
  std::mt19937 rng(12345);
  const std::string alphabet = "ab\"\\[]{},: x";
  std::vector<std::string> events;
  std::string text = "{\"traceEvents\": [";
  std::vector<std::string> expected = {"{", "events ["};
  for (int e = 0; e < 300; ++e) {
    std::string str;
    const auto len = rng() % 40;
    for (std::size_t i = 0; i < len; ++i) {
      const char c = alphabet[rng() % alphabet.size()];
      if (c == '"' || c == '\\') str += '\\';
      str += c;
    }
    const std::string event = "{\"name\": \"" + str + "\", \"args\": {\"a\": [[\"" + str + "\"], {}]}}";
    if (e) text += ",";
    expected.push_back("event @" + std::to_string(text.size()) + " " + event);
    text += event;
  }
  text += "]}";
  expected.push_back("events ]");
  expected.push_back("}");
  EXPECT_EQ(split(text, 1 << 16), expected);
  for (std::size_t chunk : {std::size_t{1}, std::size_t{3}, std::size_t{15}, std::size_t{16}, std::size_t{17},
                            std::size_t{31}, std::size_t{100}})
    EXPECT_EQ(split(text, chunk), expected) << "chunk " << chunk;
}

// Long events of quotes and brackets with a backslash now and then, so that
// most 64-byte blocks hold none (and are read by the strings' prefix XOR)
// while strings and escapes cross their edges at every alignment.
TEST(JsonSplitter, BlocksWithAndWithoutBackslashesAtEveryAlignment) {
  std::mt19937 rng(777);
  const std::string alphabet = "abcdefgh[]{},: \"";
  std::string text = "{\"traceEvents\": [";
  std::vector<std::string> expected = {"{", "events ["};
  for (int e = 0; e < 400; ++e) {
    std::string event = "{";
    const auto members = 1 + rng() % 6;
    for (std::size_t m = 0; m < members; ++m) {
      std::string str;
      const auto len = rng() % 90;
      for (std::size_t i = 0; i < len; ++i) {
        const char c = alphabet[rng() % alphabet.size()];
        if (c == '"' || rng() % 200 == 0) str += '\\';  // an escaped quote, or a rare escape
        str += c == '"' || !(str.size() && str.back() == '\\') ? c : 'n';
      }
      event += (m ? ", \"k" : "\"k") + std::to_string(m) + "\": " +
               (rng() % 3 == 0 ? "[{\"s\": \"" + str + "\"}, [[]], 1]" : "\"" + str + "\"");
    }
    event += "}";
    if (e) text += ",";
    text += std::string(rng() % 3, ' ');
    expected.push_back("event @" + std::to_string(text.size()) + " " + event);
    text += event;
  }
  text += "]}";
  expected.push_back("events ]");
  expected.push_back("}");
  for (std::size_t chunk : {std::size_t{1} << 16, std::size_t{63}, std::size_t{64}, std::size_t{65},
                            std::size_t{127}, std::size_t{1000}})
    EXPECT_EQ(split(text, chunk), expected) << "chunk " << chunk;
}

TEST(JsonSplitter, Errors) {
  // Truncated: inside an event, inside a string, between events, after a key.
  for (const std::string text : {"{\"traceEvents\": [{\"ph\": \"X\"", "{\"traceEvents\": [{\"ph\": \"X",
                                 "{\"traceEvents\": [{}, ", "{\"traceEvents\"", "{\"traceEvents\": [{}]",
                                 "{\"a\": 1,", "[", ""})
    for (std::size_t chunk : {std::size_t{1}, std::size_t{7}, std::size_t{1000}})
      EXPECT_EQ(error_of(text, chunk),
                "byte " + std::to_string(text.size() + 1) + ": unexpected end of input (truncated file?)")
          << text;
  // Malformed inputs, and the error each gives.
  const std::pair<std::string, std::string> malformed[] = {
      {"{\"traceEvents\": [1, 2,, 3]}", "byte 23: expected a value, not ','"},
      {"{\"traceEvents\": [{}}", "byte 20: expected ',' or ']' after an array element, not '}'"},
      {"{\"a\": 1 \"b\": 2}", "byte 9: expected ',' or '}' after an object member, not '\"'"},
      {"{\"a\" 1}", "byte 6: expected ':' after a member name, not '1'"},
      {"{a: 1}", "byte 2: expected a member name (a string), not 'a'"},
      {"{\"a\\x\": 1}", "byte 2: invalid string in a member name"},
      // Trailing garbage after the root.
      {"{\"traceEvents\": []} x", "byte 21: unexpected 'x' after the top-level value"},
      {"[] []", "byte 4: unexpected '[' after the top-level value"},
      {"{\"traceEvents\": []}\x01", "byte 20: unexpected byte 0x01 after the top-level value"},
  };
  for (const auto& [text, error] : malformed) EXPECT_EQ(error_of(text), error) << text;
}

TEST(JsonSplitter, ThreadedSameCallsAndErrors) {
  std::string text = "{\"deviceProperties\": [{\"id\": 0}], \"traceEvents\": [";
  for (int i = 0; i < 2000; ++i)
    text += (i ? ", " : "") + std::string("{\"ph\": \"X\", \"name\": \"k\\\"[") + std::to_string(i) + "\", \"ts\": " +
            std::to_string(i) + ".5}";
  text += "], \"distributedInfo\": {\"rank\": 3}}";
  const auto expected = split(text, 1 << 16);
  const auto in_memory = padded(text);
  for (std::size_t batch : {std::size_t{1}, std::size_t{100}, std::size_t{1} << 20}) {
    importers::kineto::ThreadedSplitter threaded(reader(text), 7, batch, 2);
    Recorder r;
    threaded.run(r);
    EXPECT_EQ(r.calls, expected) << "batch " << batch;
    // In place: the same calls, each piece a view of the text.
    importers::kineto::ThreadedSplitter in_place(importers::kineto::view(in_memory), batch, 2);
    ViewRecorder v(importers::kineto::view(in_memory));
    in_place.run(v);
    EXPECT_EQ(v.calls, expected) << "in place, batch " << batch;
  }
  // An error comes after the calls before it, as the plain splitter has it.
  const std::string bad = text.substr(0, text.size() / 2) + "}}";
  // The calls `threaded` makes on `bad`, whose error must be the plain one.
  const auto calls_until_the_error = [&bad](importers::kineto::ThreadedSplitter&& threaded) {
    Recorder r;
    try {
      threaded.run(r);
      ADD_FAILURE() << "no error";
    } catch (const JsonSplitError& e) {
      expect_the_plain_error(e, bad);
    }
    return r.calls;
  };
  const auto plain = calls_before_the_error(bad);
  ASSERT_GE(plain.size(), 900u);
  EXPECT_EQ(calls_until_the_error(importers::kineto::ThreadedSplitter(reader(bad), 64, 256, 2)), plain);
  const auto bad_in_memory = padded(bad);
  EXPECT_EQ(calls_until_the_error(importers::kineto::ThreadedSplitter(importers::kineto::view(bad_in_memory), 256, 2)),
            plain)
      << "in place";

  // The visitor's exception stops the reading thread.
  struct Throws : Recorder {
    void event(std::string_view, std::int64_t) override { throw std::runtime_error("visitor"); }
  } t;
  importers::kineto::ThreadedSplitter stopped(reader(text), 64, 256, 1);
  EXPECT_THROW(stopped.run(t), std::runtime_error);
}

// The runtime_error that comes out of splitting `text` (chunks of 64 bytes,
// batches of 512, two queued) on `threads` threads, each batch replayed and
// then handed to `work(seq)`: its message, or "no error".
template <class Work>
std::string parallel_work_error(const std::string& text, std::size_t threads, Work work) {
  importers::kineto::ThreadedSplitter threaded(reader(text), 64, 512, 2);
  try {
    threaded.run_parallel(threads, [&](std::size_t seq, const auto& replay) {
      Recorder r;
      replay(r);
      work(seq);
    });
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "no error";
}

// The batches handed to several threads: every call once, in input order
// within a batch and by batch number across them; the earliest batch's
// exception wins, the reading thread's counting after every batch.
TEST(JsonSplitter, ParallelBatchesInOrderAndTheEarliestErrorWins) {
  std::string text = "{\"deviceProperties\": [{\"id\": 0}], \"traceEvents\": [";
  for (int i = 0; i < 3000; ++i)
    text += (i ? ", " : "") + std::string("{\"ph\": \"X\", \"ts\": ") + std::to_string(i) + "}";
  text += "], \"distributedInfo\": {\"rank\": 3}}";
  const auto expected = split(text, 1 << 16);
  for (std::size_t threads : {std::size_t{1}, std::size_t{2}, std::size_t{5}}) {
    importers::kineto::ThreadedSplitter threaded(reader(text), 64, 512, 2);
    std::mutex mutex;
    std::map<std::size_t, std::vector<std::string>> batches;
    threaded.run_parallel(threads, [&](std::size_t seq, const auto& replay) {
      Recorder r;
      replay(r);
      std::lock_guard lock(mutex);
      EXPECT_TRUE(batches.emplace(seq, r.calls).second) << "batch " << seq << " twice";
    });
    std::vector<std::string> calls;
    std::size_t seq = 0;
    for (const auto& [n, c] : batches) {
      EXPECT_EQ(n, seq++);
      calls.insert(calls.end(), c.begin(), c.end());
    }
    EXPECT_GT(batches.size(), 50u);
    EXPECT_EQ(calls, expected) << threads << " threads";
  }
  // Work fails in batches 7 and 3 (batch 7 may well fail first): batch 3's
  // exception comes out.
  for (std::size_t threads : {std::size_t{1}, std::size_t{4}}) {
    EXPECT_EQ(parallel_work_error(text, threads,
                                  [](std::size_t seq) {
                                    if (seq == 7) throw std::runtime_error("batch 7");
                                    if (seq == 3) {
                                      std::this_thread::sleep_for(std::chrono::milliseconds(20));
                                      throw std::runtime_error("batch 3");
                                    }
                                  }),
              "batch 3")
        << threads << " threads";
  }
  // A structural error of the input comes after the work of every batch
  // before it, and after their exceptions.
  const std::string bad = text.substr(0, text.size() / 2) + "}}";
  for (std::size_t threads : {std::size_t{1}, std::size_t{3}}) {
    importers::kineto::ThreadedSplitter threaded(reader(bad), 64, 512, 2);
    std::atomic<std::size_t> events{0};
    try {
      threaded.run_parallel(threads, [&](std::size_t, const auto& replay) {
        Recorder r;
        replay(r);
        events += static_cast<std::size_t>(std::count_if(r.calls.begin(), r.calls.end(),
                                                         [](const std::string& c) { return c.starts_with("event"); }));
      });
      ADD_FAILURE() << "no error";
    } catch (const JsonSplitError& e) {
      expect_the_plain_error(e, bad);
    }
    const auto plain = calls_before_the_error(bad);
    EXPECT_EQ(events.load(), static_cast<std::size_t>(std::count_if(
                                 plain.begin(), plain.end(), [](const std::string& c) { return c.starts_with("event"); })));
    EXPECT_EQ(parallel_work_error(bad, threads,
                                  [](std::size_t seq) {
                                    if (seq == 2) throw std::runtime_error("batch 2");
                                  }),
              "batch 2");
  }
}

TEST(JsonSplitter, Unescape) {
  std::string out;
  ASSERT_TRUE(unescape_json_string(R"(a\"b\\c\/\n\u00e9\ud83d\ude00)", out));
  EXPECT_EQ(out, "a\"b\\c/\n\xc3\xa9\xf0\x9f\x98\x80");
  EXPECT_FALSE(unescape_json_string(R"(\ud83d)", out));
  EXPECT_FALSE(unescape_json_string(R"(\q)", out));
  EXPECT_FALSE(unescape_json_string("a\\", out));
}

}  // namespace
}  // namespace moetrace::testing
