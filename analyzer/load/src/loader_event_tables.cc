// The event tables of a trace file, one after the other or in two parts on
// two threads (trace_loader.h, read_event_tables).
#include <exception>
#include <thread>

#include "trace_loader.h"

namespace moetrace::analyzer {

void TraceLoader::read_event_tables() {
  if (read_in_parallel()) {
    read_event_tables_in_parallel();
    return;
  }
  // The order of the steps, and so of their errors.
  enter_step(kDeviceTables);
  load_activities();
  trace_.classify_kernel_names();
  enter_step(kOpTables);
  load_ops();
  read_device_and_host_tables();
  read_op_tables();
}

bool TraceLoader::read_in_parallel() const {
  if (options_.threads == 1) return false;
  return options_.threads > 1 || std::thread::hardware_concurrency() > 1;
}

void TraceLoader::read_device_and_host_tables() {
  if (step_ < kDeviceTables) {
    enter_step(kDeviceTables);
    load_activities();
    trace_.classify_kernel_names();
  }
  enter_step(kHostTables);
  if (options_.api_calls) {
    load_api_calls();
    load_sync_events();
  }
  if (options_.nvtx) {
    load_nvtx();
    load_autograd();
    load_input_shapes();
  }
}

void TraceLoader::read_op_tables() {
  if (step_ < kOpTables) {
    enter_step(kOpTables);
    load_ops();
  }
  enter_step(kMemoryAndMoeTables);
  if (options_.memory) load_memory();
  load_moe_tables();
  load_collectives();
}

TraceLoader::TraceLoader(const TraceLoader& main, Race& race)
    : db_(schema::open_trace(main.trace_.run.path)),
      options_(main.options_),
      record_(main.record_),
      rank_limit_(main.rank_limit_),
      strings_(main.strings_),
      race_(&race),
      defer_op_streams_(true) {
  options_.progress = nullptr;
  trace_.run = main.trace_.run;
  trace_.run.damage.clear();
}

void TraceLoader::read_event_tables_in_parallel() {
  Race race;
  TraceLoader second(*this, race);
  race.second_loader = &second;
  race_ = &race;
  std::exception_ptr second_error;
  int second_failed_at = INT_MAX;
  std::thread thread([&] {
    try {
      second.read_op_tables();
    } catch (const Stopped&) {
    } catch (...) {
      second_error = std::current_exception();
      second_failed_at = second.step_;
      race.failed(second.step_);
    }
  });
  std::exception_ptr error;
  try {
    read_device_and_host_tables();
  } catch (const Stopped&) {
  } catch (...) {
    error = std::current_exception();
    race.failed(step_);
  }
  thread.join();
  race_ = nullptr;
  // The first error in the order of the steps: the one that reading the
  // tables one after the other throws.
  if (error && (!second_error || step_ < second_failed_at)) std::rethrow_exception(error);
  if (second_error) std::rethrow_exception(second_error);

  auto& t = second.trace_;
  trace_.ops = std::move(t.ops);
  for (std::size_t i = 0; i < trace_.ops.size(); ++i)  // in the order stream_slot would have seen them
    trace_.ops[i].stream = stream_slot(second.op_stream_ids_[i], trace_.ops[i].rank);
  trace_.op_deps = std::move(t.op_deps);
  trace_.op_buffers = std::move(t.op_buffers);
  trace_.memory_events = std::move(t.memory_events);
  trace_.buffers = std::move(t.buffers);
  trace_.expert_load = std::move(t.expert_load);
  trace_.placements = std::move(t.placements);
  trace_.collectives = std::move(t.collectives);
  for (auto& d : t.run.damage) trace_.run.damage.push_back(std::move(d));
  for (const auto& [table, digest] : second.read_) read_[table] = digest;
  rows_done_ += second.rows_done_;
}

}  // namespace moetrace::analyzer
