#include "moetrace/cupti/converter_intake.h"

namespace moetrace::cupti {

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
  for (Announcement& a : spare_) {
    if (auto* s = std::get_if<StreamMapping>(&a)) {
      converter_.map_stream(s->context, s->stream, s->record);
    } else if (auto* d = std::get_if<DeviceMapping>(&a)) {
      converter_.map_device(d->device, d->rank);
    } else if (auto* m = std::get_if<Allocation>(&a)) {
      converter_.note_allocation(m->address, m->buffer);
    } else if (auto* o = std::get_if<NotedOp>(&a)) {
      converter_.note_op(o->label, o->launch_start, o->launch_end);
    } else if (auto* w = std::get_if<NotedWaits>(&a)) {
      converter_.note_waits(w->op, w->waits_for);
    } else if (auto* g = std::get_if<GraphNode>(&a)) {
      converter_.note_graph_node(g->node, g->op);
    } else if (auto* c = std::get_if<GraphNodeClone>(&a)) {
      converter_.note_graph_node_clone(c->clone, c->original);
    }
  }
  spare_.clear();
}

}  // namespace moetrace::cupti
