// Robustness of the parsers, fuzz-style: random truncations and mutations of
// small valid inputs (Kineto JSON, plain and gzipped, and an Nsight Systems
// export) either import or fail with one moetrace::Error line; nothing else
// escapes and nothing crashes. Seeds are fixed so a failure reproduces; for a
// deeper run (e.g. in the dev-asan build) set MOETRACE_FUZZ_SCALE=10 (10x the
// iterations) and MOETRACE_FUZZ_SEED=N (other mutations).
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstring>

#include <algorithm>
#include <cstdlib>
#include <random>

#include "import_test_util.h"
#include "moetrace/analyzer/trace.h"

namespace moetrace::testing {
namespace {

const char* kJson = R"json({"schemaVersion": 1,
 "deviceProperties": [{"id": 0, "name": "GPU", "totalGlobalMem": 1000, "numSms": 8}],
 "distributedInfo": {"rank": 0, "world_size": 2},
 "baseTimeNanoseconds": 1000,
 "traceEvents": [
  {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 2, "ts": 10.5, "dur": 50},
  {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 2, "ts": 12, "dur": 3,
   "args": {"correlation": 5}},
  {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllToAll", "pid": 0, "tid": 7, "ts": 20, "dur": 4.25,
   "args": {"device": 0, "stream": 7, "correlation": 5, "grid": [1, 1, 1], "block": [64, 1, 1],
            "Collective name": "all_to_all", "In msg nelems": 8, "Group size": 2}},
  {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pinned)", "pid": 0, "tid": 8, "ts": 30,
   "dur": 1, "args": {"device": 0, "stream": 8, "bytes": 16}},
  {"ph": "s", "id": 6, "pid": 1, "tid": 2, "ts": 29, "cat": "ac2g", "name": "ac2g"},
  {"ph": "f", "id": 6, "pid": 0, "tid": 8, "ts": 30, "cat": "ac2g", "name": "ac2g", "bp": "e"},
  {"ph": "i", "name": "[memory]", "pid": 1, "tid": 2, "ts": 11,
   "args": {"Device Type": 1, "Bytes": 256, "Addr": 4096}},
  {"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "args": {"name": "stream 7"}}
 ]})json";

int scaled(int iterations) {
  const char* scale = std::getenv("MOETRACE_FUZZ_SCALE");
  return iterations * std::max(1, scale ? std::atoi(scale) : 1);
}

std::uint32_t seed(std::uint32_t base) {
  const char* s = std::getenv("MOETRACE_FUZZ_SEED");
  return base + static_cast<std::uint32_t>(s ? std::atoi(s) : 0);
}

std::string mutate(std::string s, std::mt19937& rng) {
  std::uniform_int_distribution<int> op(0, 5);
  auto pos = [&](std::size_t n) { return std::uniform_int_distribution<std::size_t>(0, n)(rng); };
  const char noise[] = "{}[],:\"0123456789.-eE \\xnull";
  const int edits = 1 + static_cast<int>(pos(3));
  for (int e = 0; e < edits && !s.empty(); ++e) {
    switch (op(rng)) {
      case 0: s.resize(pos(s.size())); break;                                     // truncate
      case 1: s[pos(s.size() - 1)] = static_cast<char>(pos(255)); break;          // any byte
      case 2: s[pos(s.size() - 1)] = noise[pos(sizeof(noise) - 2)]; break;        // JSON-ish byte
      case 3: s.insert(pos(s.size()), 1, noise[pos(sizeof(noise) - 2)]); break;   // insert
      case 4: { auto at = pos(s.size() - 1); s.erase(at, pos(20)); break; }       // delete a run
      default: { auto at = pos(s.size() - 1); s.insert(at, s.substr(pos(s.size() - 1), pos(40))); break; }  // duplicate
    }
  }
  return s;
}

// Imports `path`; returns false on a moetrace::Error (which must be one line).
bool import_or_error(const std::string& path, importers::Format format) {
  importers::ImportOptions options;
  options.format = format;
  try {
    const auto out = temp_path("fuzz-out.db");
    importers::import_traces({path}, out, options);
    analyzer::load_trace(out);  // what was written is a readable trace
    return true;
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    EXPECT_FALSE(msg.empty());
    return false;
  }
  // Any other exception fails the test with its type and message.
}

TEST(ImportFuzz, KinetoJsonMutations) {
  const auto path = temp_path("fuzz.json");
  write_file(path, kJson);
  ASSERT_TRUE(import_or_error(path, importers::Format::kAuto));
  std::mt19937 rng(seed(20240521));
  int ok = 0, errors = 0;
  for (int i = 0; i < scaled(300); ++i) {
    write_file(path, mutate(kJson, rng));
    (import_or_error(path, importers::Format::kKineto) ? ok : errors)++;
  }
  // Both outcomes happen: the mutations reach past the parser.
  EXPECT_GT(ok, 0);
  EXPECT_GT(errors, 0);
}

TEST(ImportFuzz, GzipMutations) {
  const auto path = temp_path("fuzz.json.gz");
  std::mt19937 rng(seed(7));
  for (int i = 0; i < scaled(100); ++i) {
    {
      gzFile f = gzopen(path.c_str(), "wb");
      ASSERT_NE(f, nullptr);
      gzwrite(f, kJson, static_cast<unsigned>(std::strlen(kJson)));
      gzclose(f);
    }
    std::string bytes;
    {
      std::ifstream in(path, std::ios::binary);
      bytes.assign(std::istreambuf_iterator<char>(in), {});
    }
    write_file(path, mutate(bytes, rng));
    import_or_error(path, importers::Format::kKineto);
  }
}

TEST(ImportFuzz, NsysExportMutations) {
  const auto clean = temp_path("fuzz-clean.sqlite"), path = temp_path("fuzz.sqlite");
  {
    std::filesystem::remove(clean);
    sqlite::Database db(clean, sqlite::Database::Mode::kCreate);
    db.exec(R"(
      CREATE TABLE META_DATA_EXPORT (name TEXT, value TEXT);
      INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_SCHEMA_VERSION', '3.24.14');
      CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT);
      INSERT INTO StringIds VALUES (1, 'ncclDevKernel_SendRecv'), (2, 'cudaLaunchKernel_v7000'), (3, 'MPI Rank 0');
      CREATE TABLE ThreadNames (nameId INTEGER, priority INTEGER, globalTid INTEGER);
      INSERT INTO ThreadNames VALUES (3, 0, 16777217);
      CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, "end" INTEGER, deviceId INTEGER, streamId INTEGER,
        correlationId INTEGER, globalPid INTEGER, demangledName INTEGER, gridX INTEGER, gridY INTEGER,
        gridZ INTEGER, blockX INTEGER, blockY INTEGER, blockZ INTEGER);
      CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER, "end" INTEGER, eventClass INTEGER,
        globalTid INTEGER, correlationId INTEGER, nameId INTEGER, returnValue INTEGER);
      CREATE TABLE NVTX_EVENTS (start INTEGER, "end" INTEGER, eventType INTEGER, globalTid INTEGER, text TEXT,
        textId INTEGER, domainId INTEGER, int64Value INTEGER);
      CREATE TABLE TARGET_INFO_GPU (id INTEGER, name TEXT, uuid TEXT, smCount INTEGER);
      INSERT INTO TARGET_INFO_GPU VALUES (0, 'GPU', 'uuid-0', 8);
    )");
    // Enough rows to span several pages, so that byte mutations hit data.
    db.exec("BEGIN");
    for (int i = 0; i < 300; ++i) {
      db.exec("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (" + std::to_string(i * 100) + ", " +
              std::to_string(i * 100 + 50) + ", 0, 7, " + std::to_string(i) + ", 16777216, 1, 1, 1, 1, 64, 1, 1)");
      db.exec("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (" + std::to_string(i * 100 - 20) + ", " +
              std::to_string(i * 100 - 10) + ", 0, 16777217, " + std::to_string(i) + ", 2, 0)");
      db.exec("INSERT INTO NVTX_EVENTS VALUES (" + std::to_string(i * 100) + ", " + std::to_string(i * 100 + 60) +
              ", 59, 16777217, 'step', NULL, 0, " + std::to_string(i) + ")");
    }
    db.exec("COMMIT");
  }
  std::string bytes;
  {
    std::ifstream in(clean, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  ASSERT_TRUE(import_or_error(clean, importers::Format::kAuto));
  std::mt19937 rng(seed(99));
  std::uniform_int_distribution<std::size_t> at(100, bytes.size() - 1);
  std::uniform_int_distribution<int> byte(0, 255), count(1, 16);
  for (int i = 0; i < scaled(150); ++i) {
    std::string b = bytes;
    if (i % 10 == 9) {
      b.resize(at(rng));  // truncated database
    } else {
      for (int k = count(rng); k > 0; --k) b[at(rng)] = static_cast<char>(byte(rng));
    }
    write_file(path, b);
    import_or_error(path, importers::Format::kNsys);
  }
}

}  // namespace
}  // namespace moetrace::testing
