// A small gzip trace inflated once, whole (kineto/gzip_input.h:
// inflate_small), for both its last bytes and its parse: the same text as
// zlib's, the same tail and the same trace as the streaming path; anything
// it is not sure of (a plain file, several members, a trailer that does not
// match, a larger file, damage) left to the streaming path.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "import_test_util.h"
#include "kineto/gzip_input.h"
#include "kineto/kineto_records.h"
#include "moetrace/analyzer/run_loader.h"

namespace moetrace::testing {
namespace {

using importers::kineto::GzipInput;
using importers::kineto::inflate_small;

std::string zlib_inflated(const std::string& gz) {
  gzFile f = gzopen(gz.c_str(), "rb");
  EXPECT_NE(f, nullptr);
  std::string out;
  char buf[1 << 16];
  int n = 0;
  while ((n = gzread(f, buf, sizeof buf)) > 0) out.append(buf, static_cast<std::size_t>(n));
  gzclose(f);
  return out;
}

void gzip_members(const std::string& path, const std::vector<std::string>& parts) {
  std::filesystem::remove(path);
  for (const auto& part : parts) {
    gzFile f = gzopen(path.c_str(), "ab");
    ASSERT_NE(f, nullptr);
    gzwrite(f, part.data(), static_cast<unsigned>(part.size()));
    gzclose(f);
  }
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// The model but the lines that name the file it came from.
std::string trace_of(const std::string& path) {
  auto t = analyzer::load_trace(path);
  t.run.name.clear();
  t.run.config_json.clear();  // names the source
  std::istringstream lines(model_dump(t));
  std::string out, line;
  while (std::getline(lines, line))
    if (!line.starts_with("config import.rank.") && !line.starts_with("config import.source.")) out += line + '\n';
  return out;
}

// Kineto's own gzip file (HTA's test trace, one member): the text zlib
// inflates, the tail read_tail reads from the plain file, and the trace the
// plain file gives.
TEST(GzipInput, ASmallProfilerFileIsInflatedOnceWhole) {
  const auto gz = shared_data("kineto/hta-sampled_rank-0.json.gz");
  MOETRACE_NEED_SHARED(gz);
  ASSERT_LE(static_cast<std::int64_t>(std::filesystem::file_size(gz)), importers::kineto::kSmallGzip);
  const std::string text = zlib_inflated(gz);
  ASSERT_GT(text.size(), std::size_t{1} << 20);  // longer than the tail read_tail keeps
  const auto plain = temp_path("inflate-small.json");
  write_file(plain, text);

  const auto whole = inflate_small(gz);
  ASSERT_TRUE(whole.has_value());
  EXPECT_EQ(importers::kineto::view(*whole), text);
  EXPECT_FALSE(inflate_small(plain).has_value());  // not gzip

  const auto tail = importers::kineto::tail_of(importers::kineto::view(*whole));
  const auto streamed = importers::kineto::read_tail(plain);
  ASSERT_TRUE(streamed.has_value());
  EXPECT_EQ(tail.rank, streamed->rank);
  EXPECT_EQ(tail.base_time_ns, streamed->base_time_ns);

  EXPECT_EQ(trace_of(gz), trace_of(plain));
}

// Served from memory in the pieces asked for, with the progress of a file.
TEST(GzipInput, AnInflatedTextIsReadBackInPieces) {
  const std::string_view digits = "0123456789";
  GzipInput in("x.json.gz", importers::kineto::Bytes(digits.begin(), digits.end()));
  char buf[4];
  std::string got;
  while (const std::size_t n = in.read(buf, sizeof buf)) got.append(buf, n);
  EXPECT_EQ(got, "0123456789");
  EXPECT_EQ(in.bytes_out(), 10);
  EXPECT_DOUBLE_EQ(in.fraction(), 1.0);
}

// The whole inflated text taken at once, for the JSON splitter to cut in
// place: with the pieces' padding readable after it, and counted as read;
// once only. A text without that room is read as a stream instead.
TEST(GzipInput, AnInflatedTextIsTakenWholeWithItsPadding) {
  const auto gz = shared_data("kineto/hta-sampled_rank-1.json.gz");
  MOETRACE_NEED_SHARED(gz);
  auto whole = inflate_small(gz);
  ASSERT_TRUE(whole.has_value());
  const std::string text(importers::kineto::view(*whole));
  EXPECT_GE(whole->capacity(), whole->size() + importers::kineto::kBytesPadding);
  GzipInput in(gz, std::move(*whole));
  const auto taken = in.take_text();
  ASSERT_TRUE(taken.has_value());
  EXPECT_EQ(*taken, text);
  EXPECT_EQ(in.bytes_out(), static_cast<std::int64_t>(text.size()));
  EXPECT_DOUBLE_EQ(in.fraction(), 1.0);
  EXPECT_FALSE(in.take_text().has_value());
  char c;
  EXPECT_EQ(in.read(&c, 1), 0u);

  importers::kineto::Bytes tight(4, 'x');
  ASSERT_LT(tight.capacity(), tight.size() + importers::kineto::kBytesPadding);
  GzipInput no_room("y.json.gz", std::move(tight));
  EXPECT_FALSE(no_room.take_text().has_value());
  char buf[8];
  EXPECT_EQ(no_room.read(buf, sizeof buf), 4u);
}

// What the whole-file path is not sure of goes to the streaming path.
TEST(GzipInput, OnlyOneIntactMemberWithinTheBoundsIsInflatedWhole) {
  const std::string text = R"({"traceEvents": [], "distributedInfo": {"rank": 3}, "baseTimeNanoseconds": 5})";
  const auto one = temp_path("one-member.json.gz");
  gzip_members(one, {text});
  const auto whole = inflate_small(one);
  ASSERT_TRUE(whole.has_value());
  const auto tail = importers::kineto::tail_of(importers::kineto::view(*whole));
  EXPECT_EQ(tail.rank, 3);
  EXPECT_EQ(tail.base_time_ns, 5);

  // Two members (`cat a.gz b.gz`): the trailer's size is the last member's.
  const auto two = temp_path("two-members.json.gz");
  gzip_members(two, {text.substr(0, 20), text.substr(20)});
  EXPECT_FALSE(inflate_small(two).has_value());

  // A trailer whose size says one byte less or more than the data.
  const std::string bytes = file_bytes(one);
  for (const int delta : {-1, 1}) {
    std::string bad = bytes;
    bad[bad.size() - 4] = static_cast<char>(static_cast<unsigned char>(bad[bad.size() - 4]) + delta);
    const auto p = temp_path("bad-size.json.gz");
    write_file(p, bad);
    EXPECT_FALSE(inflate_small(p).has_value()) << delta;
  }

  // Cut short, and empty.
  const auto cut = temp_path("cut.json.gz");
  write_file(cut, bytes.substr(0, bytes.size() - 6));
  EXPECT_FALSE(inflate_small(cut).has_value());
  const auto empty = temp_path("empty.json.gz");
  write_file(empty, "");
  EXPECT_FALSE(inflate_small(empty).has_value());
  EXPECT_FALSE(inflate_small(temp_path("absent.json.gz")).has_value());

  // More than kSmallGzip on disk: random bytes hardly compress.
  std::mt19937 rng(7);
  std::string noise(static_cast<std::size_t>(importers::kineto::kSmallGzip) + (1 << 16), '\0');
  for (auto& c : noise) c = static_cast<char>(rng());
  const auto big = temp_path("big.json.gz");
  gzip_members(big, {noise});
  ASSERT_GT(static_cast<std::int64_t>(std::filesystem::file_size(big)), importers::kineto::kSmallGzip);
  EXPECT_FALSE(inflate_small(big).has_value());
}

}  // namespace
}  // namespace moetrace::testing
