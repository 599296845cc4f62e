#include "plan_builder.h"

#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <utility>

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
  Hazard& h = hazards_.emplace_back();
  h.rank = b.rank;
  h.persistent = b.persistent;
  h.bound = b.binding.kind != BufferBinding::Kind::kNone;
  plan_.buffers.push_back(std::move(b));
  return plan_.buffers.back().id;
}

namespace {

// The unused capacity of a vector, as a byte range.
template <class T>
std::pair<const void*, const void*> spare_capacity(const std::vector<T>& v) {
  return {v.data() + v.size(), v.data() + v.capacity()};
}

}  // namespace

void PlanBuilder::reserve(std::size_t ops, std::size_t buffers) {
  if (prefault_.joinable()) prefault_.join();
  plan_.ops.reserve(ops);
  plan_.buffers.reserve(buffers);
  hazards_.reserve(buffers);
#ifdef MADV_POPULATE_WRITE
  // The kernel maps the pages without writing them (Linux 5.14), so the
  // ranges may be in use meanwhile; where it cannot, nothing happens.
  const auto page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
  std::vector<std::pair<std::uintptr_t, std::uintptr_t>> pages;
  std::uintptr_t total = 0;
  for (const auto& [begin, end] : {spare_capacity(plan_.ops), spare_capacity(plan_.buffers), spare_capacity(hazards_)}) {
    const auto first = (reinterpret_cast<std::uintptr_t>(begin) + page - 1) / page * page;
    const auto last = reinterpret_cast<std::uintptr_t>(end) / page * page;
    if (last > first) {
      pages.emplace_back(first, last);
      total += last - first;
    }
  }
  if (total >= (16u << 20))  // only where it pays for a thread
    prefault_ = std::thread([pages = std::move(pages)] {
      for (const auto& [first, last] : pages) madvise(reinterpret_cast<void*>(first), last - first, MADV_POPULATE_WRITE);
    });
#endif
}

PlanBuilder::~PlanBuilder() {
  if (prefault_.joinable()) prefault_.join();  // also where building threw
}

Plan PlanBuilder::finish() {
  if (prefault_.joinable()) prefault_.join();
  return std::move(plan_);
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
  auto name_of = [this](BufferId id) -> const std::string& { return buffer(id).name; };
  for (const auto& acc : op.buffers) {
    Hazard& h = hazards_[static_cast<std::size_t>(acc.buffer.value)];
    if (h.rank != op.rank)
      throw Error(fmt::format("plan builder: op {} on rank {} touches buffer {} of rank {}",
                              op.name, op.rank.value, name_of(acc.buffer), h.rank.value));
    if (h.freed)
      throw Error(fmt::format("plan builder: op {} touches buffer {} after it was freed", op.name,
                              name_of(acc.buffer)));
    const bool writes = acc.access != schema::Access::kRead;
    depend_on(h.last_writer);
    if (writes)
      for (OpId r : h.readers) depend_on(r);
    bool acts_as_writer = writes;
    if (!h.persistent && !h.allocated) {
      h.allocated = true;
      op.alloc_before.push_back(acc.buffer);
      // Allocation fills bound buffers (inputs, zeros): later readers must
      // follow it even where this first op only reads.
      if (h.bound) acts_as_writer = true;
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
    if (h.persistent || !h.allocated || h.freed)
      throw Error(fmt::format("plan builder: op {} frees buffer {} that is {}", op.name, name_of(f),
                              h.persistent ? "persistent" : h.freed ? "already freed" : "not allocated"));
    if (h.last_writer != op.id) depend_on(h.last_writer);
    for (OpId r : h.readers) depend_on(r);
    h.freed = true;
    // A freed buffer is never touched again: drop its bookkeeping.
    std::vector<OpId>().swap(h.readers);
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
