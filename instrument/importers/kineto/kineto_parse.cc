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
#include "kineto_importer.h"
#include "moetrace/schema/error.h"

namespace moetrace::importers::kineto {

using namespace std::string_view_literals;

namespace {

// ASCII lower case, without std::tolower's locale lookup: it ran on every
// byte of every event's category (1.3 % of an import's samples).
char ascii_lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

// An op that multiplies matrices, by its name (aten::mm, addmm, bmm,
// baddbmm, matmul, linear, _grouped_mm, _scaled_mm, grouped GEMMs), any case.
bool matrix_product(std::string_view name) {
  std::string n(name);
  std::transform(n.begin(), n.end(), n.begin(), ascii_lower);
  return n.find("mm") != std::string::npos || n.find("matmul") != std::string::npos ||
         n.find("linear") != std::string::npos || n.find("gemm") != std::string::npos;
}

// A category or phase as part of a run_config key: lower case, [a-z0-9_].
std::string key_part(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, 40)) {
    const auto u = static_cast<unsigned char>(c);
    out += std::isalnum(u) ? static_cast<char>(std::tolower(u)) : '_';
  }
  return out.empty() ? "none" : out;
}

// A JSON scalar as the parser handed it.
struct Number {
  bool present = false;
  bool integral = false;
  std::int64_t i = 0;
  double d = 0;
  std::string_view text;  // raw token of floats (exact decimals), valid during the call
};

// The args we read; all others are ignored.
struct Args {
  std::optional<std::int64_t> correlation, device, stream, bytes, registers, shared;
  std::vector<std::int64_t> grid, block;
  // Strings are views of the event's text (or of simdjson's buffer where
  // they held escapes), valid while the event is read: copied where kept.
  std::string_view collective, dtype, pg_name, pg_desc, pg_ranks, in_splits, out_splits;
  std::optional<std::int64_t> in_nelems, out_nelems, group_size, seq;
  // Memory instant events ("[memory]").
  std::optional<std::int64_t> mem_bytes, mem_addr, mem_device_type, mem_device_id;
  // moetrace's own Chrome export (`moetrace export chrome`).
  std::string_view api, domain;
  std::optional<std::int64_t> payload;
  // Autograd: forward ops and the backward nodes of their gradients share a
  // sequence number; a backward node's "Fwd thread id" is its forward
  // thread's (1, 2, ...), a forward op's 0 (torch/csrc/profiler).
  std::optional<std::int64_t> sequence, fwd_thread;
  // moetrace's own export: an op slice's coordinates, a kernel's op.
  std::optional<std::int64_t> op, layer, iteration, micro_batch, chunk, peer_rank;
  std::optional<double> flops;
  std::string_view kind, phase;
  // A cpu_op's "Input Dims" and "Input type" (record_shapes=True) as compact
  // JSON text: [[8192,4096],[4096,14336]] and ["c10::BFloat16","float"].
  std::string input_dims, input_types;
  void clear() {
    correlation.reset(), device.reset(), stream.reset(), bytes.reset(), registers.reset(), shared.reset();
    grid.clear(), block.clear();
    collective = dtype = pg_name = pg_desc = pg_ranks = in_splits = out_splits = {};
    in_nelems.reset(), out_nelems.reset(), group_size.reset(), seq.reset();
    mem_bytes.reset(), mem_addr.reset(), mem_device_type.reset(), mem_device_id.reset();
    api = domain = {};
    payload.reset(), sequence.reset(), fwd_thread.reset();
    input_dims.clear(), input_types.clear();
    op.reset(), layer.reset(), iteration.reset(), micro_batch.reset(), chunk.reset(), peer_rank.reset();
    flops.reset();
    kind = phase = {};
  }
};

struct RawEvent {
  std::string_view ph, cat, name, bp;  // views, as Args' strings
  std::optional<std::int64_t> pid, tid;  // nullopt: absent or not an integer
  std::optional<std::int64_t> ts_ns, dur_ns;
  std::optional<std::int64_t> id;
  bool bad_time = false;
  Args args;
  // Empties the event, keeping the strings' and vectors' memory.
  void reset() {
    ph = cat = name = bp = {};
    pid.reset(), tid.reset(), ts_ns.reset(), dur_ns.reset(), id.reset();
    bad_time = false;
    args.clear();
  }
};

// "Memcpy HtoD (Pageable -> Device)": direction and the two memory kinds.
void parse_memcpy_name(std::string_view name, GpuActivity& a) {
  static const std::pair<std::string_view, schema::CopyKind> kinds[] = {
      {"HtoD", schema::CopyKind::kHostToDevice}, {"DtoH", schema::CopyKind::kDeviceToHost},
      {"DtoD", schema::CopyKind::kDeviceToDevice}, {"HtoH", schema::CopyKind::kHostToHost},
      {"PtoP", schema::CopyKind::kPeerToPeer}, {"HtoA", schema::CopyKind::kHostToArray},
      {"AtoH", schema::CopyKind::kArrayToHost}, {"AtoA", schema::CopyKind::kArrayToArray},
      {"AtoD", schema::CopyKind::kArrayToDevice}, {"DtoA", schema::CopyKind::kDeviceToArray}};
  for (const auto& [text, kind] : kinds)
    if (name.find(text) != std::string_view::npos) {
      a.copy_kind = static_cast<std::uint8_t>(kind);
      break;
    }
  auto mem = [](std::string_view w) {
    if (w == "Pageable") return schema::MemoryKind::kPageableHost;
    if (w == "Pinned") return schema::MemoryKind::kPinnedHost;
    if (w == "Device") return schema::MemoryKind::kDevice;
    if (w == "Managed") return schema::MemoryKind::kManaged;
    return schema::MemoryKind::kUnknown;
  };
  const auto open = name.find('('), arrow = name.find(" -> "), close = name.find(')');
  if (open != std::string_view::npos && arrow != std::string_view::npos && close != std::string_view::npos &&
      open < arrow && arrow < close) {
    a.src_kind = static_cast<std::uint8_t>(mem(name.substr(open + 1, arrow - open - 1)));
    a.dst_kind = static_cast<std::uint8_t>(mem(name.substr(arrow + 4, close - arrow - 4)));
  }
}

// The keys of an event and of its args that the handler reads, numbered
// once per key so that what follows switches on the number.
enum class Key : std::uint8_t {
  kNone,
  // An event's.
  kArgs, kBp, kCat, kDur, kId, kName, kPh, kPid, kTid, kTs,
  // Its args' (Kineto's names, then those of moetrace's own export).
  kCorrelation, kDevice, kStream, kBytes, kRegistersPerThread, kSharedMemory, kGrid, kBlock, kCollectiveName,
  kInMsgNelems, kOutMsgNelems, kGroupSize, kDtype, kPgName, kPgDescription, kPgRanks, kSeq, kInSplitSize,
  kOutSplitSize, kMemoryBytes, kAddr, kDeviceType, kDeviceId, kSequenceNumber, kFwdThreadId, kInputDims,
  kInputType, kRegisters, kSharedBytes, kCollective, kInNelems, kOutNelems, kGroupSizeExport, kGroupRanks, kApi,
  kDomain, kPayload, kOp, kKind, kLayer, kIteration, kMicroBatch, kChunk, kPhase, kFlops, kPeerRank,
};

// A fixed map of keys, looked up among those of the same length only, by
// their first eight bytes as one integer (most keys are shorter), then the
// rest.
template <std::size_t N>
class KeyMap {
 public:
  using Entry = std::pair<std::string_view, Key>;
  constexpr explicit KeyMap(std::array<Entry, N> keys) : keys_(keys) {
    std::sort(keys_.begin(), keys_.end(), [](const Entry& a, const Entry& b) {
      return a.first.size() != b.first.size() ? a.first.size() < b.first.size() : a.first < b.first;
    });
    for (std::size_t i = 0; i < N; ++i) heads_[i] = head(keys_[i].first);
    std::size_t k = 0;
    for (std::size_t len = 0; len <= kMaxLength + 1; ++len) {
      while (k < N && keys_[k].first.size() < len) ++k;
      first_[len] = k;
    }
  }
  Key find(std::string_view key) const {
    if (key.size() > kMaxLength) return Key::kNone;
    const std::uint64_t h = head(key);
    for (std::size_t i = first_[key.size()]; i < first_[key.size() + 1]; ++i)
      if (heads_[i] == h &&
          (key.size() <= 8 || std::memcmp(keys_[i].first.data() + 8, key.data() + 8, key.size() - 8) == 0))
        return keys_[i].second;
    return Key::kNone;
  }

 private:
  // The first eight bytes (fewer: zero-filled) as one little-endian
  // integer; at run time in at most three loads, not a loop over the bytes
  // (which was most of the lookups' cost).
  static constexpr std::uint64_t head(std::string_view k) {
    std::uint64_t v = 0;
    if (std::is_constant_evaluated() || std::endian::native != std::endian::little) {
      for (std::size_t i = 0; i < k.size() && i < 8; ++i) v |= std::uint64_t{static_cast<unsigned char>(k[i])} << (8 * i);
      return v;
    }
    const char* p = k.data();
    if (k.size() >= 8) {
      std::memcpy(&v, p, 8);
      return v;
    }
    unsigned shift = 0;
    if (k.size() & 4) {
      std::uint32_t w;
      std::memcpy(&w, p, 4);
      v = w, p += 4, shift = 32;
    }
    if (k.size() & 2) {
      std::uint16_t w;
      std::memcpy(&w, p, 2);
      v |= std::uint64_t{w} << shift, p += 2, shift += 16;
    }
    if (k.size() & 1) v |= std::uint64_t{static_cast<unsigned char>(*p)} << shift;
    return v;
  }
  static constexpr std::size_t kMaxLength = 32;
  std::array<Entry, N> keys_;
  std::array<std::uint64_t, N> heads_{};
  std::array<std::size_t, kMaxLength + 2> first_{};
};

Key event_key(std::string_view k) {
  static constexpr KeyMap keys(std::array<std::pair<std::string_view, Key>, 10>{{
      {"args", Key::kArgs}, {"bp", Key::kBp}, {"cat", Key::kCat}, {"dur", Key::kDur}, {"id", Key::kId},
      {"name", Key::kName}, {"ph", Key::kPh}, {"pid", Key::kPid}, {"tid", Key::kTid}, {"ts", Key::kTs}}});
  return keys.find(k);
}
Key arg_key(std::string_view k) {
  static constexpr KeyMap keys(std::array<std::pair<std::string_view, Key>, 46>{{
      {"correlation", Key::kCorrelation}, {"device", Key::kDevice}, {"stream", Key::kStream},
      {"bytes", Key::kBytes}, {"registers per thread", Key::kRegistersPerThread},
      {"shared memory", Key::kSharedMemory}, {"grid", Key::kGrid}, {"block", Key::kBlock},
      {"Collective name", Key::kCollectiveName}, {"In msg nelems", Key::kInMsgNelems},
      {"Out msg nelems", Key::kOutMsgNelems}, {"Group size", Key::kGroupSize}, {"dtype", Key::kDtype},
      {"Process Group Name", Key::kPgName}, {"Process Group Description", Key::kPgDescription},
      {"Process Group Ranks", Key::kPgRanks}, {"Seq", Key::kSeq}, {"In split size", Key::kInSplitSize},
      {"Out split size", Key::kOutSplitSize}, {"Bytes", Key::kMemoryBytes}, {"Addr", Key::kAddr},
      {"Device Type", Key::kDeviceType}, {"Device Id", Key::kDeviceId},
      {"Sequence number", Key::kSequenceNumber}, {"Fwd thread id", Key::kFwdThreadId},
      {"Input Dims", Key::kInputDims}, {"Input type", Key::kInputType}, {"registers", Key::kRegisters},
      {"shared_bytes", Key::kSharedBytes}, {"collective", Key::kCollective}, {"in_nelems", Key::kInNelems},
      {"out_nelems", Key::kOutNelems}, {"group_size", Key::kGroupSizeExport}, {"group_ranks", Key::kGroupRanks},
      {"api", Key::kApi}, {"domain", Key::kDomain}, {"payload", Key::kPayload}, {"op", Key::kOp},
      {"kind", Key::kKind}, {"layer", Key::kLayer}, {"iteration", Key::kIteration},
      {"micro_batch", Key::kMicroBatch}, {"chunk", Key::kChunk}, {"phase", Key::kPhase},
      {"flops", Key::kFlops}, {"peer_rank", Key::kPeerRank}}});
  return keys.find(k);
}

// The SAX handler: a stack of frames, each knowing what its container is.
// (The SAX interface of nlohmann::json, which the file used to be read with.)
class Handler {
 public:
  using number_integer_t = std::int64_t;
  using number_unsigned_t = std::uint64_t;
  using number_float_t = double;

  Handler(ParsedFile& out, GzipInput& in, TraceBuilder& builder, std::string label)
      : out_(&out), in_(in), builder_(builder), label_(std::move(label)) {}

  // From now on, reads single events (as inside traceEvents) into `part`,
  // without reporting progress: a handler of one of the parsing threads.
  void events_into(ParsedFile& part) {
    out_ = &part;
    frames_.assign(1, Role::kEvents);
    report_progress_ = false;
  }

  bool null() { return scalar(Number{}, nullptr); }
  bool boolean(bool) { return scalar(Number{}, nullptr); }
  bool number_integer(number_integer_t v) {
    Number n;
    n.present = n.integral = true;
    n.i = v;
    n.d = static_cast<double>(v);
    return scalar(n, nullptr);
  }
  bool number_unsigned(number_unsigned_t v) {
    Number n;
    n.present = true;
    n.integral = v <= static_cast<number_unsigned_t>(INT64_MAX);
    n.i = n.integral ? static_cast<std::int64_t>(v) : 0;
    n.d = static_cast<double>(v);
    unsigned_text_ = std::to_string(v);
    n.text = unsigned_text_;
    return scalar(n, nullptr);
  }
  bool number_float(number_float_t v, std::string_view s) {
    Number n;
    n.present = true;
    n.d = v;
    n.text = s;
    return scalar(n, nullptr);
  }
  // Strings and keys are views, valid during the call (the handler copies
  // what it keeps).
  bool string(std::string_view s) { return scalar(Number{}, &s); }

  // `k` must stay valid until the next key (simdjson's unescaped keys live
  // as long as their document; the splitter's member names for the call).
  bool key(std::string_view k) {
    key_ = k;
    const Role in = frames_.empty() ? Role::kSkip : frames_.back();
    key_id_ = in == Role::kEvent ? event_key(k) : in == Role::kArgs ? arg_key(k) : Key::kNone;
    return true;
  }

  // Whether the value of the key just given is read at all. The values of
  // the other keys of events and their args (External id, Input Strides,
  // Concrete Inputs, ...) are stepped over unparsed; their brackets and
  // strings were checked by the splitter, not their atoms.
  bool wants_value() const {
    switch (frames_.back()) {
      case Role::kEvent: return key_id_ != Key::kNone;
      case Role::kArgs:
        if (key_id_ == Key::kInputDims || key_id_ == Key::kInputType) return shapes_wanted();
        return key_id_ != Key::kNone;
      case Role::kSkip: return false;
      default: return true;
    }
  }

  bool start_object(std::size_t) {
    Role role = Role::kSkip;
    if (frames_.empty()) {
      role = Role::kRoot;
      out_->root_seen = true;
    } else {
      switch (frames_.back()) {
        case Role::kRoot:
          if (key_ == "distributedInfo"sv) role = Role::kDistInfo;
          else if (key_ == "otherData"sv) role = Role::kOtherData;
          break;
        case Role::kEvents: role = Role::kEvent; event_.reset(); break;
        case Role::kEvent:
          if (key_id_ == Key::kArgs) role = Role::kArgs;
          break;
        case Role::kDeviceList: role = Role::kDevice; device_ = DeviceProps{}; break;
        default: break;
      }
    }
    frames_.push_back(role);
    return true;
  }

  bool end_object() {
    const Role role = frames_.back();
    frames_.pop_back();
    if (role == Role::kEvent) finish_event();
    if (role == Role::kDevice) out_->devices.push_back(device_);
    return true;
  }

  bool start_array(std::size_t) {
    Role role = Role::kSkip;
    if (frames_.empty()) {
      // A bare array of events is the other Chrome trace form.
      role = Role::kEvents;
      out_->root_seen = out_->has_trace_events = true;
    } else {
      switch (frames_.back()) {
        case Role::kRoot:
          if (key_ == "traceEvents"sv) {
            role = Role::kEvents;
            out_->has_trace_events = true;
          } else if (key_ == "deviceProperties"sv) {
            role = Role::kDeviceList;
          }
          break;
        case Role::kArgs:
          if (key_id_ == Key::kInputDims || key_id_ == Key::kInputType) {
            shape_text_ = key_id_ == Key::kInputDims ? &event_.args.input_dims : &event_.args.input_types;
            shape_text_->assign("[");
            shape_first_.assign(1, true);
            role = Role::kShapes;
            break;
          }
          array_ = key_id_ == Key::kGrid ? &event_.args.grid : key_id_ == Key::kBlock ? &event_.args.block : nullptr;
          if (array_) role = Role::kArgArray;
          break;
        case Role::kShapes:
          shape_item("[");
          shape_first_.push_back(true);
          role = Role::kShapes;
          break;
        default: break;
      }
    }
    frames_.push_back(role);
    return true;
  }

  bool end_array() {
    if (frames_.back() == Role::kShapes) {
      shape_text_->push_back(']');
      shape_first_.pop_back();
    }
    frames_.pop_back();
    return true;
  }

 private:
  enum class Role : std::uint8_t {
    kRoot, kEvents, kEvent, kArgs, kArgArray, kShapes, kDeviceList, kDevice, kDistInfo, kOtherData, kSkip
  };

  // An op's input shapes are kept for matrix products and NCCL calls only
  // (finish_event); where the name came first, the others' are not read.
  bool shapes_wanted() const {
    const std::string_view name = event_.name;
    return name.empty() || name.starts_with("nccl:") || matrix_product(name);
  }

  // One element of an "Input Dims" / "Input type" list (nested lists too);
  // an op with very many inputs keeps its first 4 KiB.
  void shape_item(std::string_view text) {
    if (shape_text_->size() > 4096) return;
    if (!shape_first_.back()) shape_text_->push_back(',');
    shape_first_.back() = false;
    shape_text_->append(text);
  }

  static std::optional<std::int64_t> as_int(const Number& n) {
    if (!n.present) return std::nullopt;
    if (n.integral) return n.i;
    if (std::isfinite(n.d) && std::fabs(n.d) < 9.2e18) return static_cast<std::int64_t>(std::llround(n.d));
    return std::nullopt;
  }

  static std::optional<std::int64_t> as_ns(const Number& n, bool& bad) {
    if (!n.present) {
      bad = true;
      return std::nullopt;
    }
    if (n.integral) {
      std::int64_t ns = 0;
      if (__builtin_mul_overflow(n.i, std::int64_t{1000}, &ns)) {
        bad = true;
        return std::nullopt;
      }
      return ns;
    }
    auto ns = micros_to_ns(n.text);
    if (!ns) bad = true;
    return ns;
  }

  bool scalar(const Number& n, const std::string_view* s) {
    if (frames_.empty()) return true;
    switch (frames_.back()) {
      case Role::kRoot:
        if (key_ == "baseTimeNanoseconds"sv) {
          out_->base_time_ns = as_int(n).value_or(0);
          out_->base_time_seen = true;
        }
        break;
      case Role::kEvent: event_field(n, s); break;
      case Role::kArgs: arg_field(n, s); break;
      case Role::kArgArray:
        if (array_ && array_->size() < 8) array_->push_back(as_int(n).value_or(-1));
        break;
      case Role::kShapes:
        if (s) {
          std::string quoted = "\"";
          for (char ch : *s)
            if (ch != '"' && ch != '\\') quoted.push_back(ch);
          shape_item(quoted + "\"");
        } else {
          shape_item(!n.present ? std::string("null") : n.integral ? std::to_string(n.i) : std::string(n.text));
        }
        break;
      case Role::kDevice:
        if (key_ == "id"sv) device_.id = as_int(n).value_or(0);
        else if (key_ == "name"sv && s) device_.name = *s;
        else if (key_ == "totalGlobalMem"sv) device_.memory = as_int(n).value_or(-1);
        else if (key_ == "computeMajor"sv) device_.major = static_cast<int>(as_int(n).value_or(-1));
        else if (key_ == "computeMinor"sv) device_.minor = static_cast<int>(as_int(n).value_or(-1));
        else if (key_ == "numSms"sv) device_.sms = static_cast<int>(as_int(n).value_or(-1));
        break;
      case Role::kDistInfo:
        if (key_ == "rank"sv) out_->rank = as_int(n);
        else if (key_ == "world_size"sv) out_->world_size = as_int(n);
        else if (key_ == "backend"sv && s) out_->backend = *s;
        else if (key_ == "nccl_version"sv && s) out_->nccl_version = *s;
        break;
      case Role::kOtherData:
        // `moetrace export chrome` names its source trace here; its pids are ranks.
        if (key_ == "moetrace_trace"sv) out_->moetrace_export = true;
        break;
      case Role::kEvents:
        out_->skip("malformed_event");  // a scalar where an event object belongs
        break;
      default: break;
    }
    return true;
  }

  void event_field(const Number& n, const std::string_view* s) {
    auto& e = event_;
    switch (key_id_) {
      case Key::kPh: if (s) e.ph = *s; break;
      case Key::kCat: if (s) e.cat = *s; break;
      case Key::kName: if (s) e.name = *s; break;
      case Key::kPid: e.pid = as_int(n); break;  // string pids ("Spans") are not processes or devices
      case Key::kTid: e.tid = as_int(n); break;
      case Key::kTs: e.ts_ns = as_ns(n, e.bad_time); break;
      case Key::kDur: e.dur_ns = as_ns(n, e.bad_time); break;
      case Key::kId: e.id = as_int(n); break;
      case Key::kBp: if (s) e.bp = *s; break;
      default: break;
    }
  }

  void arg_field(const Number& n, const std::string_view* s) {
    auto& a = event_.args;
    auto text = [s](std::string_view& to) {
      if (s) to = *s;
    };
    switch (key_id_) {
      case Key::kCorrelation: a.correlation = as_int(n); break;
      case Key::kDevice: a.device = as_int(n); break;
      case Key::kStream: a.stream = as_int(n); break;
      case Key::kBytes: a.bytes = as_int(n); break;
      case Key::kRegistersPerThread: case Key::kRegisters: a.registers = as_int(n); break;
      case Key::kSharedMemory: case Key::kSharedBytes: a.shared = as_int(n); break;
      case Key::kCollectiveName: case Key::kCollective: text(a.collective); break;
      case Key::kInMsgNelems: case Key::kInNelems: a.in_nelems = as_int(n); break;
      case Key::kOutMsgNelems: case Key::kOutNelems: a.out_nelems = as_int(n); break;
      case Key::kGroupSize: case Key::kGroupSizeExport: a.group_size = as_int(n); break;
      case Key::kDtype: text(a.dtype); break;
      case Key::kPgName: text(a.pg_name); break;
      case Key::kPgDescription: text(a.pg_desc); break;
      case Key::kPgRanks: case Key::kGroupRanks: text(a.pg_ranks); break;
      case Key::kSeq: a.seq = as_int(n); break;
      case Key::kInSplitSize: text(a.in_splits); break;
      case Key::kOutSplitSize: text(a.out_splits); break;
      case Key::kMemoryBytes: a.mem_bytes = as_int(n); break;
      case Key::kAddr: a.mem_addr = as_int(n); break;
      case Key::kDeviceType: a.mem_device_type = as_int(n); break;
      case Key::kDeviceId: a.mem_device_id = as_int(n); break;
      case Key::kApi: text(a.api); break;
      case Key::kDomain: text(a.domain); break;
      case Key::kPayload: a.payload = as_int(n); break;
      case Key::kSequenceNumber: a.sequence = as_int(n); break;
      case Key::kOp: a.op = as_int(n); break;
      case Key::kKind: text(a.kind); break;
      case Key::kLayer: a.layer = as_int(n); break;
      case Key::kIteration: a.iteration = as_int(n); break;
      case Key::kMicroBatch: a.micro_batch = as_int(n); break;
      case Key::kChunk: a.chunk = as_int(n); break;
      case Key::kPhase: text(a.phase); break;
      case Key::kFlops: if (n.present) a.flops = n.d; break;
      case Key::kPeerRank: a.peer_rank = as_int(n); break;
      case Key::kFwdThreadId: a.fwd_thread = as_int(n); break;
      default: break;
    }
  }

  void finish_event() {
    if (report_progress_ && (++events_ & 0x3FFF) == 0) builder_.progress("reading " + label_, in_.fraction());
    const auto& e = event_;
    if (e.ph.empty()) {
      out_->skip("malformed_event");
      return;
    }
    if (e.ph == "M") return;  // process/thread names and sort order: display only
    if (e.bad_time || !e.ts_ns) {
      out_->skip("malformed_event");
      return;
    }
    cat_.assign(e.cat);
    std::transform(cat_.begin(), cat_.end(), cat_.begin(), ascii_lower);
    const std::string_view cat = cat_;
    if (e.ph == "X") {
      if (!e.dur_ns) {
        out_->skip("malformed_event");
        return;
      }
      const std::int64_t start = *e.ts_ns;
      std::int64_t end = 0;
      if (__builtin_add_overflow(start, *e.dur_ns, &end)) {
        out_->skip("malformed_event");
        return;
      }
      // mtia_ccp_events: the kernels of an MTIA device (libkineto aliases the
      // type to CONCURRENT_KERNEL); other accelerators' kernels are "kernel".
      if (cat == "kernel" || cat == "gpu_memcpy" || cat == "memcpy" || cat == "gpu_memset" || cat == "memset" ||
          cat == "mtia_ccp_events") {
        gpu_activity(cat, start, end);
      } else if (cat == "op" && !e.args.kind.empty() && e.args.op && e.tid) {
        // moetrace's own export of an op range.
        const auto kind = parse_op_kind(e.args.kind);
        const auto phase = parse_phase(e.args.phase.empty() ? "fwd" : e.args.phase);
        if (!kind || !phase) {
          out_->skip("malformed_event");
          return;
        }
        auto narrow = [](const std::optional<std::int64_t>& v) {
          return v && *v >= INT32_MIN && *v <= INT32_MAX ? static_cast<std::int32_t>(*v) : -1;
        };
        OpSlice o;
        o.start = start;
        o.end = end;
        o.pid = e.pid.value_or(0);
        o.tid = *e.tid;
        o.id = *e.args.op;
        o.name = out_->intern(e.name);
        o.kind = *kind;
        o.phase = *phase;
        o.layer = narrow(e.args.layer);
        o.iteration = narrow(e.args.iteration);
        o.micro_batch = narrow(e.args.micro_batch);
        o.chunk = narrow(e.args.chunk);
        o.flops = e.args.flops.value_or(-1);
        o.bytes = e.args.bytes.value_or(-1);
        o.peer = e.args.peer_rank.value_or(-1);
        out_->ops.push_back(o);
      } else if (cat == "cuda_runtime" || cat == "runtime" || cat == "cuda_driver" || cat == "cuda_api" ||
                 cat == "mtia_runtime" || cat == "xpu_runtime" || cat == "privateuse1_runtime" ||
                 cat == "privateuse1_driver") {
        // Runtime calls of the other accelerators: libkineto aliases their
        // types to RUNTIME / DRIVER.
        if (!e.tid) {
          out_->skip("malformed_event");
          return;
        }
        ApiCall a;
        a.start = start;
        a.end = end;
        a.pid = e.pid.value_or(-1);
        a.tid = *e.tid;
        a.name = out_->intern(e.name);
        a.correlation = e.args.correlation.value_or(0);
        a.driver = cat == "cuda_driver" || cat == "privateuse1_driver" || e.args.api == "driver";
        out_->api.push_back(a);
      } else if (cat == "cpu_op" || cat == "operator" || cat == "user_annotation" ||
                 cat == "python_function" || cat == "nvtx") {
        if (!e.tid) {
          out_->skip("malformed_event");
          return;
        }
        CpuRange r;
        r.start = start;
        r.end = end;
        r.tid = *e.tid;
        r.pid = e.pid.value_or(0);
        r.name = out_->intern(e.name);
        r.category = cat == "user_annotation"   ? kCategoryUserAnnotation
                     : cat == "python_function" ? kCategoryPythonFunction
                     : cat == "nvtx"            ? -1
                                                : kCategoryCpuOp;
        if (cat == "nvtx") {  // moetrace's export of an NVTX range
          r.domain = e.args.domain.empty() ? -2 : out_->intern(e.args.domain);
          r.payload = e.args.payload;
        }
        if (e.args.sequence && *e.args.sequence >= 0) {
          r.sequence = e.args.sequence;
          r.backward = e.args.fwd_thread.value_or(0) > 0;
        }
        // Shapes of the matrix products only (what the layer sizes are read
        // from): every other op's would grow the trace by a string each.
        if (!e.args.input_dims.empty() && e.args.input_dims != "[]" && matrix_product(e.name)) {
          r.input_dims = e.args.input_dims;
          r.input_types = e.args.input_types;
        }
        // An NCCL call's range ("nccl:all_to_all"): what its kernels did,
        // where the kernels lack Kineto's collective args (kineto_importer.cc).
        if (e.name.starts_with("nccl:") && !e.args.input_dims.empty()) {
          r.comm_dims = e.args.input_dims;
          r.comm_types = e.args.input_types;
        }
        out_->ranges.push_back(std::move(r));
      } else if (cat == "cuda_sync") {
        sync_activity(start, end);
      } else {
        // gpu_user_annotation (ranges projected onto a stream), profiler
        // spans ("Trace"), and whatever else a newer PyTorch emits.
        out_->skip(key_part(cat.empty() ? "uncategorized" : cat));
      }
      return;
    }
    if (e.ph == "s" || e.ph == "f" || e.ph == "t") {
      if (cat == "ac2g" && e.id && e.pid && e.tid) {
        out_->flows.push_back({*e.pid, *e.tid, *e.ts_ns, *e.id});
      } else {
        out_->skip("flow_" + key_part(cat));
      }
      return;
    }
    if ((e.ph == "i" || e.ph == "I") && e.name == "[memory]") {
      memory_event();
      return;
    }
    out_->skip(e.ph == "i" || e.ph == "I" ? "instant_event" : "phase_" + key_part(e.ph));
  }

  void gpu_activity(std::string_view cat, std::int64_t start, std::int64_t end) {
    const auto& e = event_;
    const auto device = e.args.device ? e.args.device : e.pid;
    const auto stream = e.args.stream ? e.args.stream : e.tid;
    if (!device || !stream || *device < 0 || *device > 1 << 20) {
      out_->skip("malformed_event");
      return;
    }
    GpuActivity a;
    a.start = start;
    a.end = end;
    a.device = static_cast<std::int32_t>(*device);
    a.stream = *stream;
    a.correlation = e.args.correlation.value_or(0);
    a.op = e.args.op.value_or(-1);
    if (cat == "kernel" || cat == "mtia_ccp_events") {
      a.type = ActivityType::kKernel;
      a.name = out_->intern(e.name);
      if (e.args.grid.size() == 3 && e.args.block.size() == 3) {
        for (std::size_t i = 0; i < 3; ++i) {
          a.launch[i] = static_cast<std::int32_t>(e.args.grid[i]);
          a.launch[3 + i] = static_cast<std::int32_t>(e.args.block[i]);
        }
        a.registers = static_cast<std::int32_t>(e.args.registers.value_or(-1));
        a.shared = static_cast<std::int32_t>(e.args.shared.value_or(-1));
      }
      if (!e.args.collective.empty()) {
        Collective c;
        c.name = std::string(e.args.collective);
        c.in_nelems = e.args.in_nelems.value_or(-1);
        c.out_nelems = e.args.out_nelems.value_or(-1);
        c.group_size = static_cast<std::int32_t>(e.args.group_size.value_or(-1));
        c.dtype = std::string(e.args.dtype);
        c.group_ranks = std::string(e.args.pg_ranks);
        c.process_group = std::string(e.args.pg_name);
        if (!e.args.pg_desc.empty()) {
          if (c.process_group.empty()) c.process_group = std::string(e.args.pg_desc);
          else c.process_group.append(" (").append(e.args.pg_desc).append(")");
        }
        c.in_splits = std::string(e.args.in_splits);
        c.out_splits = std::string(e.args.out_splits);
        c.seq = e.args.seq.value_or(-1);
        a.collective = static_cast<std::int32_t>(out_->collectives.size());
        out_->collectives.push_back(std::move(c));
      }
    } else if (cat.find("memcpy") != std::string::npos) {
      a.type = ActivityType::kMemcpy;
      a.bytes = e.args.bytes.value_or(0);
      parse_memcpy_name(e.name, a);
    } else {
      a.type = ActivityType::kMemset;
      a.bytes = e.args.bytes.value_or(0);
    }
    out_->gpu.push_back(a);
  }

  void sync_activity(std::int64_t start, std::int64_t end) {
    const auto& e = event_;
    const std::int32_t kind = e.name == "Event Sync"          ? 1
                              : e.name == "Stream Wait Event" ? 2
                              : e.name == "Stream Sync"       ? 3
                              : e.name == "Context Sync"      ? 4
                                                              : 0;
    const auto device = e.args.device ? e.args.device : e.pid;
    if (kind == 0 || !device || *device < 0 || *device > 1 << 20) {
      out_->skip(kind == 0 ? "cuda_sync" : "malformed_event");
      return;
    }
    SyncActivity a;
    a.start = start;
    a.end = end;
    a.device = static_cast<std::int32_t>(*device);
    a.stream = e.args.stream && *e.args.stream >= 0 ? *e.args.stream : -1;
    a.correlation = e.args.correlation.value_or(0);
    a.kind = kind;
    out_->syncs.push_back(a);
  }

  // profile_memory=True: "[memory]" instant events, Bytes > 0 an allocation,
  // < 0 a free; Device Type 1 is CUDA (0 CPU, whose memory we do not track).
  void memory_event() {
    const auto& a = event_.args;
    if (!a.mem_bytes || a.mem_device_type.value_or(-1) != 1) {
      out_->skip(a.mem_device_type.value_or(-1) == 0 ? "cpu_memory_event" : "malformed_event");
      return;
    }
    MemoryEvent m;
    m.ts = *event_.ts_ns;
    m.bytes = *a.mem_bytes;
    m.address = a.mem_addr.value_or(0);
    m.pid = event_.pid.value_or(0);
    out_->memory.push_back(m);
  }

  ParsedFile* out_;
  bool report_progress_ = true;
  GzipInput& in_;
  TraceBuilder& builder_;
  std::string label_;
  std::vector<Role> frames_;
  std::string_view key_;
  Key key_id_ = Key::kNone;  // key_ among those of an event or its args
  std::string* shape_text_ = nullptr;  // the args' input_dims or input_types being read
  std::vector<bool> shape_first_;      // per nesting level: no element yet
  RawEvent event_;
  DeviceProps device_;
  std::vector<std::int64_t>* array_ = nullptr;
  std::string unsigned_text_, cat_;
  std::int64_t events_ = 0;
};

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
    if (to.empty()) to = std::move(from);
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
ParsedFile parse(const std::string& path, TraceBuilder& builder, int threads, BatchSink* sink) {
  ParsedFile out;
  GzipInput input(path);
  const std::string label = file_name(path);
  Handler handler(out, input, builder, label);
  Replay replay(handler);

  struct Worker {
    ParsedFile unused;
    Handler handler;
    Replay replay;
    Worker(GzipInput& in, TraceBuilder& b, const std::string& label) : handler(unused, in, b, label), replay(handler) {}
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
    w->handler.events_into(part.events);
    PartReader reader(part, w->replay);
    try {
      replay_batch(reader);
    } catch (const StopBatch&) {
    }
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
  ThreadedSplitter splitter([&input](char* dst, std::size_t n) { return input.read(dst, n); },
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

}  // namespace

std::optional<Tail> read_tail(const std::string& path) {
  // The members after traceEvents: traceName, displayTimeUnit,
  // baseTimeNanoseconds (a few hundred bytes), at times distributedInfo,
  // whose pg_config lists each process group's ranks (some KB a group in a
  // run of a thousand ranks). 1 MiB holds them with room to spare; where it
  // does not, the guess fails its check and the file is imported again.
  constexpr std::size_t kTail = std::size_t{1} << 20;
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
