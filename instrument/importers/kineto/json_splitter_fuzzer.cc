// libFuzzer target: the JSON splitter streamed against the same splitter in
// place (a text in memory, its pieces views of it: a small gzip file's path).
// The first input byte chooses the streamed read size (1 to 64 bytes) and the
// threaded splitter's batch size; the rest is the JSON. Both must make the
// same visitor calls and end in the same error at the same byte, the
// threaded splitter in place too; a piece's padding must be readable (ASan).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "json_splitter.h"

namespace {

using moetrace::importers::kineto::Bytes;
using moetrace::importers::kineto::JsonSplitError;
using moetrace::importers::kineto::JsonSplitter;
using moetrace::importers::kineto::ThreadedSplitter;

struct Calls : JsonSplitter::Visitor {
  std::string log;
  void root_begin(bool array) override { log += array ? "[\n" : "{\n"; }
  void root_end(bool array) override { log += array ? "]\n" : "}\n"; }
  void member(const std::string& key, std::string_view value, std::int64_t offset) override {
    touch_padding(value);
    log += "m " + key + " " + std::to_string(offset) + " " + std::string(value) + "\n";
  }
  void events_begin() override { log += "e[\n"; }
  void events_end() override { log += "e]\n"; }
  void event(std::string_view value, std::int64_t offset) override {
    touch_padding(value);
    log += "e " + std::to_string(offset) + " " + std::string(value) + "\n";
  }
  void root_scalar(std::string_view value, std::int64_t offset) override {
    log += "s " + std::to_string(offset) + " " + std::string(value) + "\n";
  }
  static void touch_padding(std::string_view v) {
    volatile char sink = 0;
    for (std::size_t i = 0; i < JsonSplitter::kPadding; ++i) sink = sink ^ v.data()[v.size() + i];
  }
};

// The calls, then the error (byte and message) or "end".
template <class Run>
std::string outcome(Run&& run) {
  Calls calls;
  try {
    run(calls);
    calls.log += "end";
  } catch (const JsonSplitError& e) {
    calls.log += "error at " + std::to_string(e.byte()) + ": " + e.what();
  }
  return calls.log;
}

void expect_same(const std::string& a, const std::string& b, const char* what) {
  if (a == b) return;
  std::fprintf(stderr, "json splitter: %s differs from the streamed split\n--- streamed\n%s\n--- %s\n%s\n", what,
               a.c_str(), what, b.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::size_t chunk = 1 + data[0] % 64;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::size_t at = 0;
  const auto read = [&](char* dst, std::size_t n) {
    n = std::min(n, text.size() - at);
    std::memcpy(dst, text.data() + at, n);
    at += n;
    return n;
  };
  const std::string streamed = outcome([&](Calls& c) { JsonSplitter(read, chunk).run(c); });
  Bytes in_memory;
  in_memory.reserve(text.size() + JsonSplitter::kPadding);
  in_memory.assign(text.begin(), text.end());
  const std::string_view view(in_memory.data(), in_memory.size());
  expect_same(streamed, outcome([&](Calls& c) { JsonSplitter(view).run(c); }), "in place");
  expect_same(streamed, outcome([&](Calls& c) { ThreadedSplitter(view, chunk * 16, 2).run(c); }),
              "threaded in place");
  return 0;
}
