// Where converted activity records go: the trace writer in a real run, a
// vector in the unit tests of the conversion. No CUDA here.
#pragma once

#include <string_view>

#include "moetrace/instrument/records.h"
#include "moetrace/instrument/trace_writer.h"

namespace moetrace::cupti {

class RecordSink {
 public:
  virtual ~RecordSink() = default;
  virtual StringId intern(std::string_view s) = 0;
  virtual void add(const instrument::StreamRecord& r) = 0;
  virtual void add(const instrument::KernelRecord& r) = 0;
  virtual void add(const instrument::MemcpyRecord& r) = 0;
  virtual void add(const instrument::MemsetRecord& r) = 0;
  virtual void add(const instrument::MemoryEventRecord& r) = 0;
  virtual void add(const instrument::ApiCallRecord& r) = 0;
  virtual void add(const instrument::SyncRecord& r) = 0;
  virtual void add(const instrument::OverheadRecord& r) = 0;
  virtual void add(const instrument::NvtxRangeRecord& r) = 0;
  virtual void add(const instrument::OpRangeRecord& r) = 0;
};

class WriterSink final : public RecordSink {
 public:
  explicit WriterSink(instrument::TraceWriter& w) : w_(w) {}
  StringId intern(std::string_view s) override { return w_.intern(s); }
  void add(const instrument::StreamRecord& r) override { w_.add(r); }
  void add(const instrument::KernelRecord& r) override { w_.add(r); }
  void add(const instrument::MemcpyRecord& r) override { w_.add(r); }
  void add(const instrument::MemsetRecord& r) override { w_.add(r); }
  void add(const instrument::MemoryEventRecord& r) override { w_.add(r); }
  void add(const instrument::ApiCallRecord& r) override { w_.add(r); }
  void add(const instrument::SyncRecord& r) override { w_.add(r); }
  void add(const instrument::OverheadRecord& r) override { w_.add(r); }
  void add(const instrument::NvtxRangeRecord& r) override { w_.add(r); }
  void add(const instrument::OpRangeRecord& r) override { w_.add(r); }

 private:
  instrument::TraceWriter& w_;
};

}  // namespace moetrace::cupti
