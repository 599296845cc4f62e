// A run of the CUDA executor (executor_impl.h): staging of inputs, the issue
// order with each op's waits, allocations, frees and completion event, and the
// read-back of results.
#include "executor_impl.h"

namespace moetrace::cuda {

using namespace exec;

namespace {

cupti::OpLabel label_of(const plan::Op& op) {
  return cupti::OpLabel{.name = op.name, .op = op.id, .rank = op.rank, .stream = op.stream, .kind = op.kind,
                        .layer = op.coords.layer, .iteration = op.coords.iteration,
                        .micro_batch = op.coords.micro_batch, .chunk = op.coords.chunk, .phase = op.coords.phase,
                        .flops = op.flops, .bytes = op.bytes, .recv_bytes = op.received_bytes(),
                        .peer = op.send_recv_peer()};
}

// A parameter buffer's initial values (plan::param_slice), checked against its shape.
plan::Matrix checked_param_slice(const plan::ModelWeights& w, const plan::Buffer& b) {
  plan::Matrix m = plan::param_slice(w, b.binding.param);
  if (m.rows != b.rows || m.cols != b.cols)
    throw Error(fmt::format("buffer {} is {} x {} but its parameter slice is {} x {}", b.name, b.rows, b.cols,
                            m.rows, m.cols));
  return m;
}

}  // namespace

RunResult Executor::Impl::run(const plan::ModelWeights& weights, const plan::TrainingData* data, const RandomTrainingData* drawn,
              cupti::Collector* collector) {
  collector_ = collector;
  RunResult result;
  const std::size_t nb = plan_.buffers.size();
  std::fill(alloc_ns_.begin(), alloc_ns_.end(), -1);
  std::fill(free_ns_.begin(), free_ns_.end(), -1);
  if (collector_ != nullptr) {
    for (const plan::Stream& st : plan_.streams) {
      if (streams_[at(st.id)] == nullptr) continue;
      instrument::StreamRecord r;
      r.id = st.id;
      r.rank = st.rank;
      r.device = DeviceId(device_);
      r.role = std::string(plan::stream_role_name(st.role));
      r.name = st.name;
      r.priority = st.priority;
      collector_->map_stream(streams_[at(st.id)], r);
    }
    collector_->map_device(device_, env_ ? RankId(env_->rank) : RankId(0));
    // The cross-stream waits are the plan's, fixed for the run: announced
    // once here, not on the issue path whose host time bounds small ops.
    for (const plan::Op& op : plan_.ops)
      if (!waits_.waits[at(op.id)].empty()) collector_->note_waits(op.id, waits_.waits[at(op.id)]);
  }
  const std::size_t counts = static_cast<std::size_t>(plan_.iterations) *
                             static_cast<std::size_t>(std::max(plan_.dims.num_layers, 1)) *
                             static_cast<std::size_t>(sources_) *
                             static_cast<std::size_t>(std::max(plan_.dims.num_experts, 1));
  MOETRACE_CUDA_CHECK(cudaMemset(counts_, 0, std::max<std::size_t>(counts, 1) * 8));
  MOETRACE_CUDA_CHECK(cudaMemset(mismatches_, 0, 8));

  // Persistent buffers: allocated and initialised before the first op.
  live_bytes_ = 0;
  peak_bytes_ = 0;
  const std::int64_t persistent_bytes = upload_persistent(weights);
  stage_inputs(data, drawn, weights);
  prepare_capture();
  MOETRACE_CUDA_CHECK(cudaDeviceSynchronize());

  const auto t0 = std::chrono::steady_clock::now();
  result.start_ns = collector_ != nullptr ? cupti::Collector::timestamp_ns() : 0;
  waits_issued_ = 0;
  issue_ns_.assign(plan_.ops.size(), -1);
  if (opt_.cuda_graph)
    issue_graphs(result);
  else
    for (const IssueStep& step : order_) issue(step);
  MOETRACE_CUDA_CHECK(cudaDeviceSynchronize());
  release_graph_execs();
  result.end_ns = collector_ != nullptr ? cupti::Collector::timestamp_ns() : 0;
  result.wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  result.host_waits = waits_issued_;
  result.issue_ns = issue_ns_;

  // Buffers still allocated (the plan frees every transient one; be safe).
  for (std::size_t b = 0; b < nb; ++b)
    if (ptr_[b] != nullptr && !plan_.buffers[b].persistent) {
      capture_now(b);
      release_buffer(b);
    }
  read_back_load(result);
  result.routing_mismatches = 0;
  unsigned long long mism = 0;
  MOETRACE_CUDA_CHECK(cudaMemcpy(&mism, mismatches_, 8, cudaMemcpyDeviceToHost));
  result.routing_mismatches = static_cast<std::int64_t>(mism);
  collect_captures(result);
  if (opt_.capture_results) read_back_params(result);
  result.device_bytes_peak = fixed_bytes_ + persistent_bytes + peak_bytes_;
  result.transient_bytes_peak = peak_bytes_;
  result.pinned_arena_bytes = arena_.bytes;
  if (collector_ != nullptr) write_buffers(result);
  for (std::size_t b = 0; b < nb; ++b)
    if (plan_.buffers[b].persistent) release_buffer(b);
  collector_ = nullptr;
  return result;
}

std::int64_t Executor::Impl::upload_persistent(const plan::ModelWeights& weights) {
  std::map<std::int32_t, std::vector<const plan::Buffer*>> by_rank;
  std::map<std::int32_t, std::int64_t> bytes;
  for (const plan::Buffer& b : plan_.buffers)
    if (b.persistent && runs(b.rank)) {
      by_rank[b.rank.value].push_back(&b);
      bytes[b.rank.value] += bytes_[at(b.id)];
    }
  std::int64_t total = 0;
  for (const auto& [rank, buffers] : by_rank) {
    const plan::Stream* first = nullptr;
    for (const plan::Stream& st : plan_.streams)
      if (st.rank.value == rank && streams_[at(st.id)] != nullptr) {
        first = &st;
        break;
      }
    if (first == nullptr) throw Error(fmt::format("rank {} has persistent buffers but no stream", rank));
    // Allocations and the host's conversions first, then the copies back to
    // back: the device sees the transfer alone, not the seconds of host
    // work between the copies of one buffer at a time.
    std::vector<std::vector<char>> values;
    for (const plan::Buffer* b : buffers) {
      allocate_persistent(*b);
      values.push_back(persistent_values(*b, weights));
    }
    const std::int64_t n = bytes.at(rank);
    const cudaStream_t s = streams_[at(first->id)];
    cupti::OpScope scope(cupti::OpLabel{.name = "setup.weight_upload", .op = weight_upload_op(plan_, RankId(rank)),
                                        .rank = RankId(rank), .stream = first->id, .kind = OpKind::kMemcpy,
                                        .phase = Phase::kOther, .bytes = n});
    for (std::size_t k = 0; k < buffers.size(); ++k) {
      const std::size_t i = at(buffers[k]->id);
      if (!values[k].empty())  // from pageable memory: returns once staged, so `values` may go
        MOETRACE_CUDA_CHECK(cudaMemcpyAsync(ptr_[i], values[k].data(), values[k].size(), cudaMemcpyDefault, s));
      else
        MOETRACE_CUDA_CHECK(cudaMemsetAsync(ptr_[i], 0, static_cast<std::size_t>(std::max<std::int64_t>(bytes_[i], 1)), s));
    }
    total += n;
  }
  return total;
}

std::vector<char> Executor::Impl::persistent_values(const plan::Buffer& b, const plan::ModelWeights& weights) const {
  if (b.binding.kind != plan::BufferBinding::Kind::kParam) return {};
  const std::size_t i = at(b.id);
  const plan::Matrix m = checked_param_slice(weights, b);
  std::vector<char> host(static_cast<std::size_t>(bytes_[i]));
  to_device_type(m.data.data(), b.elements(), dtype_[i], host.data());
  return host;
}

void Executor::Impl::allocate_persistent(const plan::Buffer& b) {
  const std::size_t i = at(b.id);
  const auto bytes = static_cast<std::size_t>(std::max<std::int64_t>(bytes_[i], 1));
  if (b.memory == schema::MemoryKind::kPinnedHost) {
    ptr_[i] = static_cast<char*>(arena_block_.ptr) + arena_.offset[i];
  } else {
    MOETRACE_CUDA_CHECK(cudaMalloc(&ptr_[i], bytes));
  }
  alloc_ns_[i] = now_ns();
  address_[i] = reinterpret_cast<std::uint64_t>(ptr_[i]);
  if (collector_ != nullptr) collector_->note_allocation(reinterpret_cast<std::uint64_t>(ptr_[i]), b.id);
}

void Executor::Impl::stage_inputs(const plan::TrainingData* data, const RandomTrainingData* drawn,
                  const plan::ModelWeights& weights) {
  staging_offset_.assign(plan_.buffers.size(), -1);
  draw_first_.assign(plan_.buffers.size(), -1);
  draw_seed_ = drawn != nullptr ? drawn->seed : 0;
  std::int64_t total = 0;
  using K = plan::BufferBinding::Kind;
  for (const plan::Buffer& b : plan_.buffers) {
    if (b.persistent || !runs(b.rank)) continue;
    const K k = b.binding.kind;
    if (k != K::kModelInput && k != K::kOutputGrad && k != K::kParam) continue;
    if (drawn != nullptr && k != K::kParam) {
      const int block = b.binding.block;
      if (block < 0 || block >= static_cast<int>(drawn->tokens.size()) ||
          b.rows != drawn->tokens[static_cast<std::size_t>(block)] || b.cols != drawn->model_dim)
        throw Error(fmt::format("buffer {} is {} x {} but its data of block {} is not", b.name, b.rows, b.cols,
                                block));
      draw_first_[at(b.id)] = static_cast<std::int64_t>(
          training_normal_offset(*drawn, k == K::kOutputGrad, b.binding.iteration, block));
      continue;
    }
    staging_offset_[at(b.id)] = total;
    total += (bytes_[at(b.id)] + 255) / 256 * 256;
  }
  staging_ = PinnedBlock(static_cast<std::size_t>(total));
  for (const plan::Buffer& b : plan_.buffers) {
    const std::int64_t off = staging_offset_[at(b.id)];
    if (off < 0) continue;
    char* dst = static_cast<char*>(staging_.ptr) + off;
    const K k = b.binding.kind;
    if (k == K::kParam) {
      const plan::Matrix m = checked_param_slice(weights, b);
      to_device_type(m.data.data(), b.elements(), dtype_[at(b.id)], dst);
      continue;
    }
    const int it = b.binding.iteration, block = b.binding.block;
    if (it < 0 || it >= data->iterations || block < 0 || block >= data->blocks)
      throw Error(fmt::format("buffer {} wants data of iteration {} block {}, the training data has {} x {}",
                              b.name, it, block, data->iterations, data->blocks));
    const plan::Matrix& m = k == K::kModelInput ? data->input(it, block) : data->output_grad(it, block);
    if (m.rows != b.rows || m.cols != b.cols)
      throw Error(fmt::format("buffer {} is {} x {} but its data is {} x {}", b.name, b.rows, b.cols, m.rows,
                              m.cols));
    to_device_type(m.data.data(), b.elements(), dtype_[at(b.id)], dst);
  }
}

void Executor::Impl::prepare_capture() {
  capture_offset_.assign(plan_.buffers.size(), -1);
  if (!opt_.capture_results) return;
  std::int64_t total = 0;
  using K = plan::BufferBinding::Kind;
  for (const plan::Buffer& b : plan_.buffers) {
    if (!runs(b.rank) || (b.binding.kind != K::kModelOutput && b.binding.kind != K::kInputGrad)) continue;
    capture_offset_[at(b.id)] = total;
    total += (bytes_[at(b.id)] + 255) / 256 * 256;
  }
  capture_ = PinnedBlock(static_cast<std::size_t>(total));
}

void Executor::Impl::issue(const IssueStep& step) {
  if (!step.collective) {
    const plan::Op& op = plan_.op(step.ops.front());
    const auto t0 = std::chrono::steady_clock::now();
    {
      cupti::OpScope scope(label_of(op));
      prologue(op);
      execute(op);
    }
    issue_ns_[at(op.id)] = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
    epilogue(op);
    return;
  }
  std::vector<const plan::Op*> ops;
  std::vector<cupti::OpLabel> labels;
  for (OpId x : step.ops) {
    ops.push_back(&plan_.op(x));
    labels.push_back(label_of(plan_.op(x)));
  }
  for (std::size_t i = 0; i < ops.size(); ++i) {
    cupti::OpScope scope(labels[i]);
    prologue(*ops[i]);
  }
  const plan::Collective& c = *ops.front()->collective();
  comm_->begin(*this, ops);
  const int phases = comm_->phases(c);
  for (int ph = 0; ph < phases; ++ph) {
    if (ph > 0) comm_->barrier(*this, ops);
    for (std::size_t i = 0; i < ops.size(); ++i) {
      cupti::OpScope scope(labels[i]);
      comm_->launch(*this, *ops[i], ph);
    }
  }
  comm_->end(*this, ops);
  for (const plan::Op* op : ops) epilogue(*op);
}

void Executor::Impl::prologue(const plan::Op& op) {
  const cudaStream_t s = stream(op.stream);
  for (OpId d : waits_.waits[at(op.id)]) {
    if (!segments_.of_op.empty() && implied_by_graph_order(segments_.of_op[at(d)])) continue;
    MOETRACE_CUDA_CHECK(cudaStreamWaitEvent(s, done_[at(d)], 0));
    ++waits_issued_;
  }
  using K = plan::BufferBinding::Kind;
  for (BufferId id : op.alloc_before) {
    const std::size_t b = at(id);
    const plan::Buffer& buf = plan_.buffers[b];
    if (ptr_[b] != nullptr) throw Error(fmt::format("op {} allocates buffer {} twice", op.name, buf.name));
    const auto bytes = static_cast<std::size_t>(std::max<std::int64_t>(bytes_[b], 1));
    if (buf.memory == schema::MemoryKind::kPinnedHost) {
      ptr_[b] = static_cast<char*>(arena_block_.ptr) + arena_.offset[b];
      for (BufferId r : arena_.reuse_waits[b]) {
        if (!freed_segment_.empty() && implied_by_graph_order(freed_segment_[at(r)])) continue;
        MOETRACE_CUDA_CHECK(cudaStreamWaitEvent(s, freed_[at(r)], 0));
        ++waits_issued_;
      }
    } else {
      MOETRACE_CUDA_CHECK(cudaMallocAsync(&ptr_[b], bytes, s));
      live_bytes_ += bytes_[b];
      peak_bytes_ = std::max(peak_bytes_, live_bytes_);
    }
    alloc_ns_[b] = now_ns();
    address_[b] = reinterpret_cast<std::uint64_t>(ptr_[b]);
    if (collector_ != nullptr) collector_->note_allocation(reinterpret_cast<std::uint64_t>(ptr_[b]), id);
    switch (buf.binding.kind) {
      case K::kZero:
      case K::kGrad:
      case K::kOptimizerState:
      case K::kInputGrad:  // accumulated into by the permute backward
        MOETRACE_CUDA_CHECK(cudaMemsetAsync(ptr_[b], 0, bytes, s));
        break;
      case K::kModelInput:
      case K::kOutputGrad:
      case K::kParam:
        if (draw_first_[b] >= 0) {
          kernels::fill_normal(s, dtype_[b], ptr_[b], buf.elements(), draw_seed_,
                               static_cast<std::uint64_t>(draw_first_[b]));
          break;
        }
        MOETRACE_CUDA_CHECK(cudaMemcpyAsync(ptr_[b], static_cast<char*>(staging_.ptr) + staging_offset_[b],
                                            static_cast<std::size_t>(bytes_[b]), cudaMemcpyHostToDevice, s));
        break;
      case K::kNone:
      case K::kModelOutput:
        break;
    }
  }
}

void Executor::Impl::epilogue(const plan::Op& op) {
  const cudaStream_t s = stream(op.stream);
  for (BufferId id : op.free_after) {
    const std::size_t b = at(id);
    if (ptr_[b] == nullptr) throw Error(fmt::format("op {} frees buffer {} that is not allocated", op.name,
                                                    plan_.buffers[b].name));
    if (!capture_offset_.empty() && capture_offset_[b] >= 0)
      MOETRACE_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(capture_.ptr) + capture_offset_[b], ptr_[b],
                                          static_cast<std::size_t>(bytes_[b]), cudaMemcpyDeviceToHost, s));
    if (plan_.buffers[b].memory == schema::MemoryKind::kPinnedHost) {
      if (freed_[b] != nullptr) MOETRACE_CUDA_CHECK(cudaEventRecord(freed_[b], s));
      if (!freed_segment_.empty()) freed_segment_[b] = segment_;
    } else {
      MOETRACE_CUDA_CHECK(cudaFreeAsync(ptr_[b], s));
      live_bytes_ -= bytes_[b];
    }
    free_ns_[b] = now_ns();
    ptr_[b] = nullptr;
  }
  if (done_[at(op.id)] != nullptr) MOETRACE_CUDA_CHECK(cudaEventRecord(done_[at(op.id)], s));
}

void Executor::Impl::read_back_load(RunResult& result) {
  const int L = std::max(plan_.dims.num_layers, 1), E = std::max(plan_.dims.num_experts, 1);
  std::vector<unsigned long long> host(static_cast<std::size_t>(plan_.iterations) * L * sources_ * E);
  if (!host.empty())
    MOETRACE_CUDA_CHECK(cudaMemcpy(host.data(), counts_, host.size() * 8, cudaMemcpyDeviceToHost));
  std::set<std::tuple<int, int, int>> counted;
  for (const IssueStep& step : order_)
    for (OpId x : step.ops) {
      const plan::Op& op = plan_.op(x);
      const GateSource src = gate_source(plan_, op);
      if (src.counted && src.block >= 0 && src.block < sources_ && op.coords.iteration >= 0 &&
          op.coords.iteration < plan_.iterations && op.coords.layer >= 0 && op.coords.layer < L)
        counted.insert({op.coords.iteration, op.coords.layer, src.block});
    }
  for (const auto& [it, layer, source] : counted)
    for (int e = 0; e < E; ++e) {
      plan::ExpertLoadEntry entry;
      entry.iteration = it;
      entry.layer = layer;
      entry.source = source;
      entry.expert = e;
      entry.tokens = static_cast<std::int64_t>(host[((static_cast<std::size_t>(it) * L + layer) * sources_ + source) * E + e]);
      result.measured_load.push_back(entry);
    }
}

void Executor::Impl::collect_captures(RunResult& result) {
  if (!opt_.capture_results) return;
  const std::size_t n = static_cast<std::size_t>(plan_.iterations) * static_cast<std::size_t>(std::max(plan_.blocks, 1));
  result.outputs.assign(n, plan::Matrix{});
  result.input_grads.assign(n, plan::Matrix{});
  using K = plan::BufferBinding::Kind;
  for (const plan::Buffer& b : plan_.buffers) {
    const std::int64_t off = capture_offset_[at(b.id)];
    if (off < 0) continue;
    const std::size_t slot = static_cast<std::size_t>(b.binding.iteration) * static_cast<std::size_t>(plan_.blocks) +
                             static_cast<std::size_t>(b.binding.block);
    if (b.binding.iteration < 0 || b.binding.block < 0 || slot >= n) continue;
    plan::Matrix m = plan::Matrix::zeros(b.rows, b.cols);
    from_device_type(static_cast<const char*>(capture_.ptr) + off, b.elements(), dtype_[at(b.id)], m.data.data());
    (b.binding.kind == K::kModelOutput ? result.outputs : result.input_grads)[slot] = std::move(m);
  }
}

void Executor::Impl::read_back_params(RunResult& result) {
  for (const plan::Buffer& b : plan_.buffers) {
    if (!b.persistent || !runs(b.rank) || b.binding.kind != plan::BufferBinding::Kind::kParam) continue;
    std::vector<char> host(static_cast<std::size_t>(bytes_[at(b.id)]));
    MOETRACE_CUDA_CHECK(cudaMemcpy(host.data(), ptr_[at(b.id)], host.size(), cudaMemcpyDefault));
    CapturedParam p;
    p.rank = b.rank;
    p.slice = b.binding.param;
    p.value = plan::Matrix::zeros(b.rows, b.cols);
    from_device_type(host.data(), b.elements(), dtype_[at(b.id)], p.value.data.data());
    result.final_params.push_back(std::move(p));
  }
}

void Executor::Impl::write_buffers(const RunResult& result) {
  instrument::TraceWriter& w = collector_->writer();
  for (const plan::Buffer& b : plan_.buffers) {
    if (!runs(b.rank) || alloc_ns_[at(b.id)] < 0) continue;
    w.add(instrument::BufferRecord{.id = b.id, .rank = b.rank, .tag = std::string(plan::buffer_tag_name(b.tag)),
                                   .bytes = bytes_[at(b.id)], .memory_kind = b.memory, .layer = b.layer,
                                   .chunk = b.chunk, .alloc_ns = alloc_ns_[at(b.id)],
                                   .free_ns = b.persistent ? result.end_ns : free_ns_[at(b.id)],
                                   .address = address_[at(b.id)]});
  }
  for (const auto& e : result.measured_load)
    w.add(instrument::ExpertLoadRecord{e.iteration, e.layer, e.source, e.expert, e.tokens});
}

}  // namespace moetrace::cuda
