#include "plan_builder.h"

#include <fmt/format.h>

#include <algorithm>

#include "moetrace/schema/error.h"

namespace moetrace::plan::detail {

PlanBuilder::PlanBuilder(std::string variant, int world_size) {
  plan_.variant = std::move(variant);
  plan_.world_size = world_size;
}

StreamId PlanBuilder::stream(RankId rank, StreamRole role, std::string_view suffix) {
  const std::string name =
      fmt::format("rank{}.{}", rank.value, suffix.empty() ? stream_role_name(role) : suffix);
  for (const auto& s : plan_.streams)
    if (s.rank == rank && s.name == name) return s.id;
  Stream s;
  s.id = StreamId(static_cast<std::int32_t>(plan_.streams.size()));
  s.rank = rank;
  s.role = role;
  s.name = name;
  plan_.streams.push_back(s);
  return s.id;
}

BufferId PlanBuilder::add_buffer(Buffer b) {
  b.id = BufferId(static_cast<std::int64_t>(plan_.buffers.size()));
  plan_.buffers.push_back(std::move(b));
  hazards_.emplace_back();
  return plan_.buffers.back().id;
}

OpId PlanBuilder::add(OpArgs a) {
  Op op;
  op.id = OpId(static_cast<std::int64_t>(plan_.ops.size()));
  op.kind = a.kind;
  op.name = std::move(a.name);
  op.rank = a.rank;
  op.stream = a.stream;
  op.coords = a.coords;
  op.flops = a.flops;
  op.bytes = a.bytes;
  op.buffers = data_accesses(a.data);
  for (const auto& extra : a.extra_access) {
    auto it = std::find_if(op.buffers.begin(), op.buffers.end(),
                           [&](const BufferAccess& x) { return x.buffer == extra.buffer; });
    if (it == op.buffers.end())
      op.buffers.push_back(extra);
    else if (it->access != extra.access)
      it->access = schema::Access::kReadWrite;
  }
  op.data = std::move(a.data);
  std::vector<OpId> deps = std::move(a.extra_deps);

  auto depend_on = [&](OpId d) {
    if (d.valid()) deps.push_back(d);
  };
  for (const auto& acc : op.buffers) {
    Hazard& h = hazards_[static_cast<std::size_t>(acc.buffer.value)];
    const Buffer& b = plan_.buffers[static_cast<std::size_t>(acc.buffer.value)];
    if (b.rank != op.rank)
      throw Error(fmt::format("plan builder: op {} on rank {} touches buffer {} of rank {}",
                              op.name, op.rank.value, b.name, b.rank.value));
    if (h.freed)
      throw Error(fmt::format("plan builder: op {} touches buffer {} after it was freed", op.name,
                              b.name));
    const bool writes = acc.access != schema::Access::kRead;
    depend_on(h.last_writer);
    if (writes)
      for (OpId r : h.readers) depend_on(r);
    bool acts_as_writer = writes;
    if (!b.persistent && !h.allocated) {
      h.allocated = true;
      op.alloc_before.push_back(b.id);
      // Allocation fills bound buffers (inputs, zeros): later readers must
      // follow it even where this first op only reads.
      if (b.binding.kind != BufferBinding::Kind::kNone) acts_as_writer = true;
    }
    if (acts_as_writer) {
      h.last_writer = op.id;
      h.readers.clear();
    } else {
      h.readers.push_back(op.id);
    }
  }
  for (BufferId f : a.free) {
    Hazard& h = hazards_[static_cast<std::size_t>(f.value)];
    const Buffer& b = plan_.buffers[static_cast<std::size_t>(f.value)];
    if (b.persistent || !h.allocated || h.freed)
      throw Error(fmt::format("plan builder: op {} frees buffer {} that is {}", op.name, b.name,
                              b.persistent ? "persistent" : h.freed ? "already freed" : "not allocated"));
    if (h.last_writer != op.id) depend_on(h.last_writer);
    for (OpId r : h.readers) depend_on(r);
    h.freed = true;
    op.free_after.push_back(f);
  }
  std::sort(deps.begin(), deps.end());
  deps.erase(std::unique(deps.begin(), deps.end()), deps.end());
  deps.erase(std::remove(deps.begin(), deps.end(), op.id), deps.end());
  op.deps = std::move(deps);
  plan_.ops.push_back(std::move(op));
  return plan_.ops.back().id;
}

}  // namespace moetrace::plan::detail
