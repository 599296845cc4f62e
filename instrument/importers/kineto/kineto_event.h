// What one event of a PyTorch-profiler (Kineto) trace is, as the parser
// reads it: its numbers (Number), the args it keeps (Args, RawEvent), and the
// keys it knows (Key, KeyMap: numbered once, so that the handler switches on
// numbers). Private to the Kineto importer (kineto_parse.cc, kineto_handler.h,
// kineto_events.cc).
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kineto_records.h"
#include "moetrace/schema/ascii.h"
#include "moetrace/schema/schema.h"

namespace moetrace::importers::kineto {

using namespace std::string_view_literals;

// A category or phase as part of a run_config key: lower case, [a-z0-9_].
inline std::string key_part(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, 40)) {
    out += ascii_alnum(c) ? ascii_lower(c) : '_';
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
  // A "cuda_sync" record: the stream whose event it waited for and the
  // correlation id of that event's cudaEventRecord (-1 in Kineto: unknown).
  std::optional<std::int64_t> wait_on_stream, wait_on_record;
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
    wait_on_stream.reset(), wait_on_record.reset();
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
inline void parse_memcpy_name(std::string_view name, GpuActivity& a) {
  for (auto k = static_cast<std::int32_t>(schema::CopyKind::kHostToDevice);
       k <= static_cast<std::int32_t>(schema::kLastCopyKind); ++k)
    if (name.find(schema::copy_kind_abbreviation(static_cast<schema::CopyKind>(k))) != std::string_view::npos) {
      a.copy_kind = static_cast<std::uint8_t>(k);
      break;
    }
  auto mem = [](std::string_view w) {
    for (auto k : {schema::MemoryKind::kDevice, schema::MemoryKind::kPinnedHost, schema::MemoryKind::kManaged,
                   schema::MemoryKind::kPageableHost})
      if (w == schema::kineto_memory_kind_name(k)) return k;
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
  kWaitOnStream, kWaitOnEventRecordCorrId,
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
  static constexpr std::size_t kMaxLength = 40;
  std::array<Entry, N> keys_;
  std::array<std::uint64_t, N> heads_{};
  std::array<std::size_t, kMaxLength + 2> first_{};
};

inline Key event_key(std::string_view k) {
  static constexpr KeyMap keys(std::array<std::pair<std::string_view, Key>, 10>{{
      {"args", Key::kArgs}, {"bp", Key::kBp}, {"cat", Key::kCat}, {"dur", Key::kDur}, {"id", Key::kId},
      {"name", Key::kName}, {"ph", Key::kPh}, {"pid", Key::kPid}, {"tid", Key::kTid}, {"ts", Key::kTs}}});
  return keys.find(k);
}
inline Key arg_key(std::string_view k) {
  static constexpr KeyMap keys(std::array<std::pair<std::string_view, Key>, 48>{{
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
      {"flops", Key::kFlops}, {"peer_rank", Key::kPeerRank},
      // A "cuda_sync" record's (enable_cuda_sync_events=True): the stream
      // that recorded the event waited for, and its cudaEventRecord call.
      {"wait_on_stream", Key::kWaitOnStream},
      {"wait_on_cuda_event_record_corr_id", Key::kWaitOnEventRecordCorrId}}});
  return keys.find(k);
}

}  // namespace moetrace::importers::kineto
