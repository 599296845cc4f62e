#include "moetrace/plan/plan.h"

#include <numeric>

#include "moetrace/plan/routing.h"
#include "moetrace/schema/enum_names.h"

namespace moetrace::plan {

constexpr EnumName<StreamRole> kStreamRoles[] = {
    {StreamRole::kCompute, "compute"},
    {StreamRole::kComm, "comm"},
    {StreamRole::kCopy, "copy"},
};

std::string_view stream_role_name(StreamRole r) { return enum_name(kStreamRoles, r); }

constexpr EnumName<BufferTag> kBufferTags[] = {
    {BufferTag::kTI, "T_I"},
    {BufferTag::kTDI, "T_DI"},
    {BufferTag::kTM, "T_M"},
    {BufferTag::kTDO, "T_DO"},
    {BufferTag::kTO, "T_O"},
    {BufferTag::kGradTI, "dT_I"},
    {BufferTag::kGradTDI, "dT_DI"},
    {BufferTag::kGradTM, "dT_M"},
    {BufferTag::kGradTDO, "dT_DO"},
    {BufferTag::kGradTO, "dT_O"},
    {BufferTag::kActivation, "activation"},
    {BufferTag::kActivationGrad, "activation_grad"},
    {BufferTag::kRouting, "routing"},
    {BufferTag::kParams, "params"},
    {BufferTag::kGrads, "grads"},
    {BufferTag::kOptimizer, "optimizer"},
    {BufferTag::kWorkspace, "workspace"},
    {BufferTag::kHostOffload, "host_offload"},
};

std::string_view buffer_tag_name(BufferTag t) { return enum_name(kBufferTags, t); }

constexpr EnumName<ParamKind> kParamKinds[] = {
    {ParamKind::kGate, "gate"},
    {ParamKind::kExpert, "expert"},
    {ParamKind::kDense, "dense"},
};

std::string_view param_kind_name(ParamKind k) { return enum_name(kParamKinds, k); }

constexpr EnumName<CollectiveKind> kCollectiveKinds[] = {
    {CollectiveKind::kAllToAllV, "all_to_all_v"},
    {CollectiveKind::kAllReduce, "all_reduce"},
    {CollectiveKind::kBroadcast, "broadcast"},
    {CollectiveKind::kReduce, "reduce"},
    {CollectiveKind::kSendRecv, "send_recv"},
};

std::string_view collective_kind_name(CollectiveKind k) { return enum_name(kCollectiveKinds, k); }

std::int64_t Op::received_bytes() const {
  const auto* c = collective();
  if (c == nullptr || c->kind != CollectiveKind::kAllToAllV) return -1;
  // A timing-only exchange without transfers (the counts before a dispatch)
  // takes in what it sends, as the simulator charges it (all_to_all_traffic).
  if (c->recvs.empty()) return c->sends.empty() ? bytes : -1;
  std::int64_t received = 0;
  for (const auto& t : c->recvs)
    if (t.peer != rank) received += t.bytes;
  return received;
}

RankId Op::send_recv_peer() const {
  const auto* c = collective();
  if (c == nullptr || c->kind != CollectiveKind::kSendRecv) return RankId{};
  if (!c->sends.empty()) return c->sends.front().peer;
  if (!c->recvs.empty()) return c->recvs.front().peer;
  return RankId{};
}

// Load patterns of the synthetic routing (routing.h), named with the plan's enums.
constexpr EnumName<LoadPattern> kLoadPatterns[] = {
    {LoadPattern::kBalanced, "balanced"},
    {LoadPattern::kZipf, "zipf"},
    {LoadPattern::kDrifting, "drifting"},
};

std::string_view load_pattern_name(LoadPattern p) { return enum_name(kLoadPatterns, p); }

LoadPattern parse_load_pattern(std::string_view name, std::string_view key) {
  return parse_enum(kLoadPatterns, name, key);
}

std::int64_t RoutedLayout::chunk_total(int c) const {
  std::int64_t total = 0;
  for (std::size_t i = 0; i < experts.size(); ++i) total += rows_in_chunk(c, i);
  return total;
}

std::int64_t RoutedLayout::chunk_offset(int c) const {
  // Chunks 0..c-1 hold, per expert, rows [0, chunk_begin(n, c)).
  std::int64_t total = 0;
  for (std::int64_t n : expert_rows) total += chunk_begin(n, c);
  return total;
}

std::int64_t RoutedLayout::offset(int c, std::size_t i) const {
  std::int64_t off = chunk_offset(c);
  for (std::size_t j = 0; j < i; ++j) off += rows_in_chunk(c, j);
  return off;
}

std::int64_t RoutedLayout::total_rows() const {
  return std::accumulate(expert_rows.begin(), expert_rows.end(), std::int64_t{0});
}

int RoutedLayout::index_of(int expert) const {
  for (std::size_t i = 0; i < experts.size(); ++i)
    if (experts[i] == expert) return static_cast<int>(i);
  return -1;
}

}  // namespace moetrace::plan

namespace moetrace::plan {
namespace {

using schema::Access;

struct AccessList {
  std::vector<BufferAccess> list;
  void add(BufferId b, Access a) {
    if (!b.valid()) return;
    for (auto& x : list)
      if (x.buffer == b) {
        if (x.access != a) x.access = Access::kReadWrite;
        return;
      }
    list.push_back({b, a});
  }
  void read(BufferId b) { add(b, Access::kRead); }
  void write(BufferId b) { add(b, Access::kWrite); }
  void update(BufferId b) { add(b, Access::kReadWrite); }
};

}  // namespace

std::vector<BufferAccess> data_accesses(const OpData& data) {
  AccessList a;
  std::visit(
      [&](const auto& d) {
        using T = std::decay_t<decltype(d)>;
        if constexpr (std::is_same_v<T, GateForward>) {
          a.read(d.x.buffer); a.read(d.weight); a.write(d.probs); a.write(d.routing);
        } else if constexpr (std::is_same_v<T, GateBackward>) {
          a.read(d.x.buffer); a.read(d.weight); a.update(d.grad); a.read(d.probs);
          a.read(d.routing); a.read(d.d_weights); a.update(d.dx.buffer);
        } else if constexpr (std::is_same_v<T, Permute>) {
          a.read(d.x.buffer); a.read(d.routing); a.write(d.out.buffer);
        } else if constexpr (std::is_same_v<T, PermuteBackward>) {
          a.read(d.routing); a.read(d.d_permuted.buffer); a.update(d.dx.buffer);
        } else if constexpr (std::is_same_v<T, Unpermute>) {
          a.read(d.routing); a.read(d.combined.buffer); a.write(d.y.buffer);
        } else if constexpr (std::is_same_v<T, UnpermuteBackward>) {
          a.read(d.routing); a.read(d.dy.buffer); a.read(d.combined.buffer);
          a.write(d.d_combined.buffer); a.write(d.d_weights);
        } else if constexpr (std::is_same_v<T, FfnForward>) {
          a.read(d.params); a.read(d.input); a.write(d.middle); a.write(d.output);
        } else if constexpr (std::is_same_v<T, FfnBackward>) {
          a.read(d.params); a.update(d.grads); a.read(d.input); a.read(d.middle);
          a.read(d.d_output); a.write(d.d_input);
        } else if constexpr (std::is_same_v<T, FfnRecompute>) {
          a.read(d.params); a.read(d.input); a.write(d.middle);
        } else if constexpr (std::is_same_v<T, Collective>) {
          if (!d.moves_data) return;
          for (const auto& s : d.sends) a.read(s.view.buffer);
          for (const auto& r : d.recvs)
            a.add(r.view.buffer, d.kind == CollectiveKind::kReduce ? Access::kReadWrite : Access::kWrite);
          if (d.kind == CollectiveKind::kAllReduce) a.update(d.inout.buffer);
        } else if constexpr (std::is_same_v<T, Copy>) {
          a.read(d.src.buffer); a.write(d.dst.buffer);
        } else if constexpr (std::is_same_v<T, SgdStep>) {
          a.update(d.params); a.update(d.grads);
        }
      },
      data);
  return std::move(a.list);
}

CopyDirection copy_direction(const Plan& plan, const Op& op) {
  schema::MemoryKind src = schema::MemoryKind::kDevice, dst = schema::MemoryKind::kDevice;
  if (const auto* c = std::get_if<plan::Copy>(&op.data)) {
    if (c->src.buffer.valid()) src = plan.buffer(c->src.buffer).memory;
    if (c->dst.buffer.valid()) dst = plan.buffer(c->dst.buffer).memory;
  } else if (op.kind == OpKind::kOffload) {
    dst = schema::MemoryKind::kPinnedHost;
  } else if (op.kind == OpKind::kPrefetch) {
    src = schema::MemoryKind::kPinnedHost;
  }
  const bool sd = src == schema::MemoryKind::kDevice, dd = dst == schema::MemoryKind::kDevice;
  const auto kind = sd && dd ? schema::CopyKind::kDeviceToDevice
                    : sd     ? schema::CopyKind::kDeviceToHost
                    : dd     ? schema::CopyKind::kHostToDevice
                             : schema::CopyKind::kHostToHost;
  return {kind, src, dst};
}

}  // namespace moetrace::plan
