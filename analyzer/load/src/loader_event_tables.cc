// The event tables of a trace file, one after the other or in two parts on
// two threads (trace_loader.h, read_event_tables).
#include <exception>
#include <mutex>
#include <optional>
#include <thread>

#include "trace_loader.h"

namespace moetrace::analyzer {

// The API calls' rows split in blocks of kApiBlock rowids, taken by the two
// loaders from either end.
struct TraceLoader::ApiBlocks {
  std::int64_t first_rowid = 0;
  std::int64_t count = 0;
  std::vector<std::vector<ApiCall>> from_last;  // the rows of the blocks taken from the last
  std::int64_t next_first = 0, next_last = -1;  // the next block to take from either end
  std::mutex mutex;

  std::int64_t take(bool from_first) {
    std::lock_guard lock(mutex);
    if (next_first > next_last) return -1;
    return from_first ? next_first++ : next_last--;
  }
};

void TraceLoader::read_event_tables() {
  if (read_in_parallel()) {
    read_event_tables_in_parallel();
    return;
  }
  // The order of the steps, and so of their errors.
  read_device_tables();
  read_op_tables();
  if (options_.api_calls) {
    enter_step(kApiCalls);
    load_api_calls(trace_.api_calls, true);
    verify("api_calls");
    sort_api_calls();
  }
  read_host_tables();
  read_memory_and_moe_tables();
}

bool TraceLoader::read_in_parallel() const {
  if (options_.threads == 1) return false;
  return options_.threads > 1 || std::thread::hardware_concurrency() > 1;
}

void TraceLoader::read_device_tables() {
  enter_step(kDeviceTables);
  load_activities();
  trace_.classify_kernel_names();
}

void TraceLoader::read_host_tables() {
  enter_step(kHostTables);
  if (options_.api_calls) load_sync_events();
  if (options_.nvtx) {
    load_nvtx();
    load_autograd();
    load_input_shapes();
  }
}

void TraceLoader::read_op_tables() {
  enter_step(kOpTables);
  load_ops();
}

void TraceLoader::read_memory_and_moe_tables() {
  enter_step(kMemoryAndMoeTables);
  if (options_.memory) load_memory();
  load_moe_tables();
  load_collectives();
}

void TraceLoader::read_api_call_blocks(ApiBlocks& blocks, bool from_first) {
  for (std::int64_t b; (b = blocks.take(from_first)) >= 0;) {
    enter_step(kApiCalls, b);
    const std::int64_t first = blocks.first_rowid + b * kApiBlock;
    load_api_calls(from_first ? trace_.api_calls : blocks.from_last[static_cast<std::size_t>(b)], false, first,
                   first + kApiBlock - 1);
  }
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
  // The API calls' blocks, where their rowids are about as many as their
  // rows (a file whose rowids spread far is read by this loader alone).
  ApiBlocks api;
  if (options_.api_calls) {
    // A table these queries fail on is read whole in its step, which throws
    // the error in its order.
    try {
      const auto first = db_.query_int("SELECT min(rowid) FROM api_calls");
      const auto last = db_.query_int("SELECT max(rowid) FROM api_calls");
      if (first && last && *last >= *first) {
        std::optional<std::int64_t> rows;
        if (record_)
          if (const auto it = record_->find("api_calls"); it != record_->end()) rows = it->second.rows;
        if (!rows) rows = db_.query_int("SELECT count(*) FROM api_calls").value_or(0);
        const std::int64_t blocks = (*last - *first) / kApiBlock + 1;
        if (blocks <= 2 * (*rows / kApiBlock) + 2) {
          api.first_rowid = *first;
          api.count = blocks;
          api.next_last = blocks - 1;
          api.from_last.resize(static_cast<std::size_t>(blocks));
          reserve_huge(trace_.api_calls, recorded_rows("api_calls"));
        }
      }
    } catch (const std::exception&) {
    }
  }
  const bool api_in_blocks = api.count > 0;

  Race race;
  TraceLoader second(*this, race);
  race.second_loader = &second;
  race_ = &race;
  std::exception_ptr second_error;
  std::int64_t second_failed_at = INT64_MAX;
  std::thread thread([&] {
    try {
      second.read_op_tables();
      // Its own tables first, then the API calls' blocks until the two
      // meet: the blocks share out what is left, so neither thread waits.
      second.read_memory_and_moe_tables();
      second.read_api_call_blocks(api, false);
    } catch (const Stopped&) {
    } catch (...) {
      second_error = std::current_exception();
      second_failed_at = second.step_;
      race.failed(second.step_);
    }
  });
  std::exception_ptr error;
  try {
    read_device_tables();
    if (api_in_blocks) {
      read_api_call_blocks(api, true);
    } else if (options_.api_calls) {
      enter_step(kApiCalls);
      load_api_calls(trace_.api_calls, true);
    }
    read_host_tables();
  } catch (const Stopped&) {
  } catch (...) {
    error = std::current_exception();
    race.failed(step_);
  }
  thread.join();
  race_ = nullptr;
  // The first error in the order of the steps: the one that reading the
  // tables one after the other throws. Past the API calls, their check
  // against the record comes first.
  const std::int64_t failed_at = std::min(error ? step_ : INT64_MAX, second_failed_at);
  const auto api_calls_read = [&] {
    if (!options_.api_calls) return;
    for (auto& rows : api.from_last) {
      trace_.api_calls.insert(trace_.api_calls.end(), rows.begin(), rows.end());
      std::vector<ApiCall>().swap(rows);
    }
    api.from_last.clear();
    if (const auto it = second.read_.find("api_calls"); it != second.read_.end()) {
      auto& d = read_["api_calls"];
      d.rows += it->second.rows;
      d.sum += it->second.sum;
      second.read_.erase(it);
    }
    verify("api_calls");
    sort_api_calls();
  };
  if (failed_at >= position(kHostTables)) api_calls_read();
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
