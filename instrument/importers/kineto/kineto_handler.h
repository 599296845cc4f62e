// The SAX handler of the Kineto parser: a stack of frames, each knowing what
// its container is, that fills a RawEvent from an event's members and hands
// it, finished, to the event kinds (kineto_events.cc: GPU activities,
// synchronisation, memory, host ranges, process metadata) into compact
// records. Replay (kineto_parse.cc) feeds it. Private to the Kineto importer.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "../common/trace_builder.h"
#include "gzip_input.h"
#include "kineto_event.h"
#include "kineto_importer.h"
#include "kineto_records.h"

namespace moetrace::importers::kineto {

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

  // An op's input shapes are kept for matrix products, top-k and NCCL calls
  // only (finish_event); where the name came first, the others' are not read.
  bool shapes_wanted() const {
    const std::string_view name = event_.name;
    return name.empty() || name.starts_with("nccl:") || schema::shapes_kept_name(name);
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
      case Key::kWaitOnStream: a.wait_on_stream = as_int(n); break;
      case Key::kWaitOnEventRecordCorrId: a.wait_on_record = as_int(n); break;
      case Key::kFwdThreadId: a.fwd_thread = as_int(n); break;
      default: break;
    }
  }

  void finish_event();

  void gpu_activity(std::string_view cat, std::int64_t start, std::int64_t end);

  void sync_activity(std::int64_t start, std::int64_t end);

  // profile_memory=True: "[memory]" instant events, Bytes > 0 an allocation,
  // < 0 a free; Device Type 1 is CUDA (0 CPU, whose memory we do not track).
  void memory_event();

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

}  // namespace moetrace::importers::kineto
