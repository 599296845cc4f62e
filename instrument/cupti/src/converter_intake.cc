#include "moetrace/cupti/converter_intake.h"

#include <variant>

namespace moetrace::cupti {

namespace {

// One call operator a kind of announcement (std::visit's usual helper).
template <class... F>
struct Overloaded : F... {
  using F::operator()...;
};
template <class... F>
Overloaded(F...) -> Overloaded<F...>;  // clang before 17 deduces no aggregate

}  // namespace

void ConverterIntake::push(Announcement a) {
  std::lock_guard lock(inbox_mu_);
  inbox_.push_back(std::move(a));
}

void ConverterIntake::map_stream(std::uint32_t context, std::uint32_t stream,
                                 const instrument::StreamRecord& record) {
  push(StreamMapping{context, stream, record});
}

void ConverterIntake::map_device(std::uint32_t device, RankId rank) { push(DeviceMapping{device, rank}); }

void ConverterIntake::note_allocation(std::uint64_t address, BufferId buffer) {
  push(Allocation{address, buffer});
}

void ConverterIntake::note_op(const OpLabel& label, std::int64_t launch_start, std::int64_t launch_end) {
  push(NotedOp{label, launch_start, launch_end});
}

void ConverterIntake::note_waits(OpId op, std::vector<OpId> waits_for) {
  push(NotedWaits{op, std::move(waits_for)});
}

void ConverterIntake::note_graph_node(std::uint64_t node, OpId op) { push(GraphNode{node, op}); }

void ConverterIntake::note_graph_node_clone(std::uint64_t clone, std::uint64_t original) {
  push(GraphNodeClone{clone, original});
}

std::size_t ConverterIntake::waiting() const {
  std::lock_guard lock(inbox_mu_);
  return inbox_.size();
}

void ConverterIntake::drain() {
  {
    // Swap rather than copy: the issuing thread gets back an empty vector
    // with the capacity of the last batch, so its push_back rarely allocates.
    std::lock_guard lock(inbox_mu_);
    spare_.swap(inbox_);
  }
  for (Announcement& a : spare_)
    std::visit(Overloaded{
                   [&](StreamMapping& m) { converter_.map_stream(m.context, m.stream, m.record); },
                   [&](DeviceMapping& m) { converter_.map_device(m.device, m.rank); },
                   [&](Allocation& m) { converter_.note_allocation(m.address, m.buffer); },
                   [&](NotedOp& m) { converter_.note_op(m.label, m.launch_start, m.launch_end); },
                   [&](NotedWaits& m) { converter_.note_waits(m.op, m.waits_for); },
                   [&](GraphNode& m) { converter_.note_graph_node(m.node, m.op); },
                   [&](GraphNodeClone& m) { converter_.note_graph_node_clone(m.clone, m.original); },
               },
               a);
  spare_.clear();
}

}  // namespace moetrace::cupti
