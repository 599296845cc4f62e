#include "text_trace.h"

#include <algorithm>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <stdexcept>

#include "moetrace/instrument/trace_writer.h"
#include "moetrace/schema/sqlite.h"

namespace moetrace::testing {
namespace {

using Fields = std::map<std::string, std::string>;

struct Line {
  std::string type;
  Fields fields;
  int number;

  std::string take(const std::string& key, const std::string& dflt = "\x01") {
    auto it = fields.find(key);
    if (it == fields.end()) {
      if (dflt == "\x01")
        throw std::runtime_error("text trace line " + std::to_string(number) + ": missing " + key);
      return dflt;
    }
    auto v = it->second;
    fields.erase(it);
    return v;
  }
  std::int64_t num(const std::string& key, std::int64_t dflt = INT64_MIN) {
    auto v = take(key, dflt == INT64_MIN ? "\x01" : std::to_string(dflt));
    return std::stoll(v, nullptr, 0);
  }
  void done() const {
    if (!fields.empty())
      throw std::runtime_error("text trace line " + std::to_string(number) + ": unknown key " +
                               fields.begin()->first);
  }
};

// What every GPU activity has: its rank, stream and times, the call that
// launched it (correlation id) and its op.
template <class Record>
void read_activity(Line& l, Record& r) {
  r.rank = RankId(static_cast<std::int32_t>(l.num("rank")));
  r.stream = StreamId(static_cast<std::int32_t>(l.num("stream")));
  r.start_ns = l.num("start");
  r.end_ns = l.num("end");
  r.correlation_id = l.num("corr", 0);
  r.op = OpId(l.num("op", -1));
}

}  // namespace

std::string temp_path(std::string_view name) {
  static const auto dir = [] {
    auto d = std::filesystem::temp_directory_path() / ("moetrace-test-" + std::to_string(getpid()));
    std::filesystem::create_directories(d);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(std::filesystem::temp_directory_path() /
                                      ("moetrace-test-" + std::to_string(getpid())),
                                  ec);
    });
    return d;
  }();
  return (dir / std::string(name)).string();
}

std::string load_lines(int iteration, int layer, std::initializer_list<std::initializer_list<int>> tokens) {
  std::string s;
  int src = 0;
  for (const auto& row : tokens) {
    int expert = 0;
    for (const int n : row) {
      if (n != 0)
        s += "load iteration=" + std::to_string(iteration) + " layer=" + std::to_string(layer) +
             " src=" + std::to_string(src) + " expert=" + std::to_string(expert) + " tokens=" + std::to_string(n) +
             "\n";
      ++expert;
    }
    ++src;
  }
  return s;
}

void write_text_trace(const std::string& path, std::string_view text) {
  std::vector<Line> lines;
  std::istringstream in{std::string(text)};
  std::string raw;
  int number = 0;
  instrument::RunRecord run;
  run.backend = "test";
  while (std::getline(in, raw)) {
    ++number;
    if (auto hash = raw.find('#'); hash != std::string::npos) raw.resize(hash);
    std::istringstream words(raw);
    Line line{{}, {}, number};
    if (!(words >> line.type)) continue;
    std::string kv;
    while (words >> kv) {
      auto eq = kv.find('=');
      if (eq == std::string::npos)
        throw std::runtime_error("text trace line " + std::to_string(number) + ": expected key=value, got " + kv);
      line.fields[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    if (line.type == "run") {
      run.world_size = static_cast<int>(line.num("world_size", 1));
      run.backend = line.take("backend", "test");
      run.variant = line.take("variant", "");
      run.name = line.take("name", "");
      run.simulated = line.num("simulated", 0) != 0;
      line.done();
    } else {
      lines.push_back(std::move(line));
    }
  }
  instrument::TraceWriter w(path, run, {});
  for (auto& l : lines) {
    if (l.type == "stream") {
      instrument::StreamRecord s;
      s.id = StreamId(static_cast<std::int32_t>(l.num("id")));
      s.rank = RankId(static_cast<std::int32_t>(l.num("rank")));
      s.device = DeviceId(static_cast<std::int32_t>(l.num("device", s.rank.value)));
      s.role = l.take("role", "compute");
      s.name = l.take("name", s.role);
      w.add(s);
    } else if (l.type == "op") {
      instrument::OpRangeRecord op;
      op.id = OpId(l.num("id", -1));
      op.rank = RankId(static_cast<std::int32_t>(l.num("rank")));
      op.stream = StreamId(static_cast<std::int32_t>(l.num("stream")));
      const auto kind = l.take("kind");
      auto k = parse_op_kind(kind);
      if (!k) throw std::runtime_error("text trace line " + std::to_string(l.number) + ": unknown op kind " + kind);
      op.kind = *k;
      op.name = w.intern(l.take("name", kind));
      op.layer = static_cast<std::int32_t>(l.num("layer", -1));
      op.iteration = static_cast<std::int32_t>(l.num("iteration", -1));
      op.micro_batch = static_cast<std::int32_t>(l.num("micro_batch", -1));
      op.chunk = static_cast<std::int32_t>(l.num("chunk", -1));
      auto phase = parse_phase(l.take("phase", "fwd"));
      if (!phase) throw std::runtime_error("text trace line " + std::to_string(l.number) + ": bad phase");
      op.phase = *phase;
      op.start_ns = l.num("start");
      op.end_ns = l.num("end");
      op.bytes = l.num("bytes", -1);
      op.recv_bytes = l.num("recv_bytes", -1);
      op.launch_start_ns = l.num("launch_start", -1);
      op.launch_end_ns = l.num("launch_end", -1);
      op.flops = std::stod(l.take("flops", "-1"));
      op.nvtx_id = l.num("nvtx", -1);
      op.peer = RankId(static_cast<std::int32_t>(l.num("peer", -1)));
      w.add(op);
    } else if (l.type == "kernel") {
      instrument::KernelRecord k;
      read_activity(l, k);
      k.name = w.intern(l.take("name", "kernel"));
      w.add(k);
    } else if (l.type == "memcpy") {
      instrument::MemcpyRecord m;
      read_activity(l, m);
      m.bytes = l.num("bytes", 0);
      m.copy_kind = static_cast<schema::CopyKind>(l.num("copy_kind", 8));
      m.src_kind = static_cast<schema::MemoryKind>(l.num("src_kind", 0));
      m.dst_kind = static_cast<schema::MemoryKind>(l.num("dst_kind", 0));
      w.add(m);
    } else if (l.type == "memset") {
      instrument::MemsetRecord m;
      read_activity(l, m);
      m.bytes = l.num("bytes", 0);
      w.add(m);
    } else if (l.type == "nvtx") {
      instrument::NvtxRangeRecord n;
      n.rank = RankId(static_cast<std::int32_t>(l.num("rank")));
      n.thread_id = l.num("thread", 1);
      n.start_ns = l.num("start");
      n.end_ns = l.num("end", -1);
      n.domain = w.intern(l.take("domain", "moetrace"));
      n.name = w.intern(l.take("name", "range"));
      if (auto p = l.take("payload", ""); !p.empty()) n.payload_int = std::stoll(p, nullptr, 0);
      n.input_dims = l.take("dims", "");
      n.input_types = l.take("types", "");
      w.add(n);
    } else if (l.type == "collective") {
      instrument::CollectiveRecord c;
      c.rank = RankId(static_cast<std::int32_t>(l.num("rank")));
      c.start_ns = l.num("start");
      c.end_ns = l.num("end");
      c.correlation_id = l.num("corr", 0);
      c.name = l.take("name", "all_to_all");
      c.group_size = static_cast<std::int32_t>(l.num("group_size", -1));
      c.process_group = l.take("process_group", "");
      c.group_ranks = l.take("group_ranks", "");
      c.in_nelems = l.num("in_nelems", -1);
      c.seq = l.num("seq", -1);
      w.add(c);
    } else if (l.type == "device") {
      instrument::DeviceRecord d;
      d.id = DeviceId(static_cast<std::int32_t>(l.num("id")));
      d.name = l.take("name", "");
      std::replace(d.name.begin(), d.name.end(), '_', ' ');
      w.add(d);
    } else if (l.type == "layer") {
      instrument::LayerRecord r{.layer = static_cast<int>(l.num("layer")), .kind = l.take("kind", "moe"),
                                .num_experts = static_cast<int>(l.num("experts", -1)),
                                .top_k = static_cast<int>(l.num("top_k", -1)), .model_dim = l.num("model_dim", -1),
                                .hidden_dim = l.num("hidden_dim", -1), .tokens = l.num("tokens", -1)};
      w.add(r);
    } else if (l.type == "config") {
      for (auto it = l.fields.begin(); it != l.fields.end();) {
        w.set_config(it->first, it->second);
        it = l.fields.erase(it);
      }
    } else if (l.type == "api") {
      instrument::ApiCallRecord a;
      a.rank = RankId(static_cast<std::int32_t>(l.num("rank")));
      a.thread_id = l.num("thread", 1);
      a.start_ns = l.num("start");
      a.end_ns = l.num("end");
      a.name = w.intern(l.take("name", "cudaLaunchKernel"));
      a.correlation_id = l.num("corr");
      w.add(a);
    } else if (l.type == "alloc" || l.type == "free") {
      instrument::MemoryEventRecord e;
      e.rank = RankId(static_cast<std::int32_t>(l.num("rank")));
      e.ts_ns = l.num("ts");
      e.alloc = l.type == "alloc";
      e.address = static_cast<std::uint64_t>(l.num("address"));
      e.bytes = l.num("bytes");
      e.buffer = BufferId(l.num("buffer", -1));
      e.memory_kind = static_cast<schema::MemoryKind>(l.num("memory_kind", 1));
      w.add(e);
    } else if (l.type == "buffer") {
      instrument::BufferRecord b;
      b.id = BufferId(l.num("id"));
      b.rank = RankId(static_cast<std::int32_t>(l.num("rank")));
      b.tag = l.take("tag");
      b.bytes = l.num("bytes");
      b.layer = static_cast<std::int32_t>(l.num("layer", -1));
      b.chunk = static_cast<std::int32_t>(l.num("chunk", -1));
      b.alloc_ns = l.num("alloc", -1);
      b.free_ns = l.num("free", -1);
      b.memory_kind = static_cast<schema::MemoryKind>(l.num("memory_kind", 1));
      w.add(b);
    } else if (l.type == "use") {
      instrument::OpBufferRecord u;
      u.op = OpId(l.num("op"));
      u.buffer = BufferId(l.num("buffer"));
      const auto access = l.take("access", "r");
      u.access = access == "w" ? schema::Access::kWrite
                 : access == "rw" ? schema::Access::kReadWrite
                                  : schema::Access::kRead;
      w.add(u);
    } else if (l.type == "load") {
      w.add(instrument::ExpertLoadRecord{static_cast<std::int32_t>(l.num("iteration")),
                                         static_cast<std::int32_t>(l.num("layer")),
                                         static_cast<std::int32_t>(l.num("src")),
                                         static_cast<std::int32_t>(l.num("expert")), l.num("tokens")});
    } else if (l.type == "place") {
      instrument::ExpertPlacementRecord p;
      p.iteration = static_cast<std::int32_t>(l.num("iteration"));
      p.layer = static_cast<std::int32_t>(l.num("layer"));
      p.expert = static_cast<std::int32_t>(l.num("expert"));
      p.rank = static_cast<std::int32_t>(l.num("rank"));
      p.role = l.take("role", "home");
      w.add(p);
    } else if (l.type == "dep") {
      w.add(instrument::OpDepRecord{OpId(l.num("op")), OpId(l.num("on"))});
    } else {
      throw std::runtime_error("text trace line " + std::to_string(l.number) + ": unknown record " + l.type);
    }
    l.done();
  }
  w.close();
}

void alter_trace(const std::string& path, std::string_view sql) {
  sqlite::Database db(path, sqlite::Database::Mode::kReadWrite);
  db.exec(sql);
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace moetrace::testing
