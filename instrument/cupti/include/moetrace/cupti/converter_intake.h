// The activity converter shared by two threads without making either wait
// for the other's work: the thread that issues the GPU work announces
// streams, devices, allocations and ops (an op per OpScope, an allocation
// per plan buffer) into an inbox under a lock held only for a push_back;
// CUPTI's buffer-completion thread converts a whole buffer (thousands of
// records, kernel names demangled) under a second lock, having first moved
// the inbox's announcements into the converter in the order they were made.
// An announcement therefore reaches the converter before every buffer that
// completes after it was made, as it did when both threads shared one lock.
// No CUDA here (CUPTI headers only), so the locking is unit-tested anywhere.
#pragma once

#include <cstdint>
#include <mutex>
#include <utility>
#include <variant>
#include <vector>

#include "moetrace/cupti/activity_converter.h"

namespace moetrace::cupti {

class ConverterIntake {
 public:
  ConverterIntake(RecordSink& sink, ConverterOptions options) : converter_(sink, std::move(options)) {}

  // The issuing thread: never waits for a conversion in progress.
  void map_stream(std::uint32_t context, std::uint32_t stream, const instrument::StreamRecord& record);
  void map_device(std::uint32_t device, RankId rank);
  void note_allocation(std::uint64_t address, BufferId buffer);
  void note_op(const OpLabel& label, std::int64_t launch_start, std::int64_t launch_end);
  void note_waits(OpId op, std::vector<OpId> waits_for);
  // From CUPTI's resource callbacks, on the thread that captures or
  // instantiates a CUDA graph (activity_converter.h).
  void note_graph_node(std::uint64_t node, OpId op);
  void note_graph_node_clone(std::uint64_t clone, std::uint64_t original);

  // Runs `f(converter)` under the conversion lock, after every announcement
  // made so far has been applied. Conversion of buffers, finish() and
  // reading stats all go through here, one at a time.
  template <class F>
  decltype(auto) with_converter(F&& f) {
    std::lock_guard lock(convert_mu_);
    drain();
    return std::forward<F>(f)(converter_);
  }

  // Announcements made and not yet applied (for the tests).
  std::size_t waiting() const;

 private:
  struct StreamMapping {
    std::uint32_t context, stream;
    instrument::StreamRecord record;
  };
  struct DeviceMapping {
    std::uint32_t device;
    RankId rank;
  };
  struct Allocation {
    std::uint64_t address;
    BufferId buffer;
  };
  struct NotedOp {
    OpLabel label;
    std::int64_t launch_start, launch_end;
  };
  struct NotedWaits {
    OpId op;
    std::vector<OpId> waits_for;
  };
  struct GraphNode {
    std::uint64_t node;
    OpId op;
  };
  struct GraphNodeClone {
    std::uint64_t clone, original;
  };
  using Announcement =
      std::variant<StreamMapping, DeviceMapping, Allocation, NotedOp, NotedWaits, GraphNode, GraphNodeClone>;

  void push(Announcement a);
  void drain();  // with convert_mu_ held

  mutable std::mutex inbox_mu_;  // guards inbox_ only
  std::vector<Announcement> inbox_;
  std::mutex convert_mu_;  // guards converter_ and spare_
  std::vector<Announcement> spare_;
  ActivityConverter converter_;
};

}  // namespace moetrace::cupti
