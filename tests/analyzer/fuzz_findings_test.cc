// What the analyzer's fuzz targets found (trace_loader_fuzzer,
// moe_rules_fuzzer), each reduced to a hand-made input.
//
// Every moetrace::Error is the one line the command-line tool prints, also
// where its message quotes what a damaged or hostile file held (SQLite quoting
// a damaged schema's SQL, the rules validator quoting a property name, both
// with newlines).
#include <gtest/gtest.h>

#include "moetrace/analyzer/moe_recognition.h"
#include "moetrace/analyzer/trace.h"
#include "moetrace/schema/error.h"
#include "text_trace.h"
#include "error_of.h"

namespace moetrace::analyzer {
namespace {

template <typename F>
std::string error_of(F&& f) {
  return testing::error_of(f, "(no error)");
}

TEST(FuzzFindings, ControlCharactersAreEscaped) {
  EXPECT_EQ(one_line("a\nb\r\tc\x01" "d\x7f"), "a\\nb\\r\\tc\\x01d\\x7f");
  EXPECT_EQ(one_line("caf\xc3\xa9 stays"), "caf\xc3\xa9 stays");  // UTF-8 is not a control character
  EXPECT_STREQ(Error("x\ny").what(), "x\\ny");
  EXPECT_STREQ(ConfigError(std::string("k\n")).what(), "k\\n");
}

TEST(FuzzFindings, DamagedSchemaSqlInATrace) {
  const auto path = testing::temp_path("damaged-schema.db");
  testing::write_text_trace(path, "kernel rank=0 stream=0 start=0 end=5\n");
  testing::alter_trace(path,
                       "PRAGMA writable_schema = ON; UPDATE sqlite_schema SET sql = 'CREATE TABLE expert_placement (x "
                       "''a,\n  PRIMARY KEY (x)\n) WITHOUT ROWID' WHERE name = 'expert_placement';");
  const auto msg = error_of([&] { load_trace(path); });
  EXPECT_EQ(msg.rfind(path + ": ", 0), 0u) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

TEST(FuzzFindings, RuleFileQuotingANewline) {
  const auto msg = error_of([] {
    parse_moe_rules("{\"version\": 1, \"ranges\": [{\"label\": \"step\", \"\\nname\": \"^Step\", \"role\": \"iteration\"}]}",
                    "rules.json");
  });
  EXPECT_EQ(msg.rfind("rules.json: ", 0), 0u) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

// A capture group or coordinate past int32 is an error naming the rule, not
// std::out_of_range out of the parser (libFuzzer: deadly signal) or a value
// wrapped to another one.
TEST(FuzzFindings, RuleCoordinatePastInt32) {
  for (const char* coord : {"\"$10000000000000000000000\"", "4294967296", "18446744073709551615"}) {
    const auto msg = error_of([&] {
      parse_moe_rules(std::string("{\"version\": 1, \"ranges\": [{\"label\": \"step\", \"name\": \"^Step(\\\\d+)\", "
                                  "\"role\": \"iteration\", \"iteration\": ") + coord + "}]}",
                      "rules.json");
    });
    EXPECT_EQ(msg.rfind("rules.json: ", 0), 0u) << coord << ": " << msg;
    EXPECT_NE(msg.find("iteration"), std::string::npos) << msg;
  }
}

// A string table whose max(id) is not its largest id (a damaged b-tree; here
// an id stored as text, which sorts after every integer) is damage, not a
// write past the end of the loader's table (ASan: heap-buffer-overflow).
TEST(FuzzFindings, StringIdsBeyondMaxIdAreDamage) {
  const auto path = testing::temp_path("string-ids.db");
  testing::write_text_trace(path, "kernel rank=0 stream=0 start=0 end=5\n");
  testing::alter_trace(path, "DROP TABLE strings; CREATE TABLE strings (id, value TEXT NOT NULL);"
                             "INSERT INTO strings VALUES (50, 'gemm'), ('1', 'text id');");
  EXPECT_EQ(error_of([&] { load_trace(path); }), path + ": string table is damaged");
}

}  // namespace
}  // namespace moetrace::analyzer
