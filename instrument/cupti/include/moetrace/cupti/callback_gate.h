// How CUPTI's buffer callbacks reach the collector: CUPTI calls them on its
// own threads, also while (or after) the collector closes. A callback enters
// the gate and holds a shared pass for as long as it uses the collector's
// state (converting, counting dropped records, returning the buffer to the
// pool); close() waits until every pass is returned and then shuts the gate,
// so a callback either finishes before the trace is finished and the writer
// closed, or sees no collector at all. Callbacks do not wait for each other
// (a buffer request on the issuing thread must not wait for a conversion).
// No CUDA here.
#pragma once

#include <mutex>
#include <shared_mutex>

namespace moetrace::cupti {

template <class T>
class CallbackGate {
 public:
  class Pass {
   public:
    explicit Pass(CallbackGate& gate) : lock_(gate.mu_), target_(gate.target_) {}
    T* get() const { return target_; }
    explicit operator bool() const { return target_ != nullptr; }

   private:
    std::shared_lock<std::shared_mutex> lock_;
    T* target_;
  };

  void open(T* target) {
    std::unique_lock lock(mu_);
    target_ = target;
  }
  // Returns once no callback holds a pass; later passes see nullptr.
  void shut() {
    std::unique_lock lock(mu_);
    target_ = nullptr;
  }
  Pass enter() { return Pass(*this); }

 private:
  std::shared_mutex mu_;
  T* target_ = nullptr;
};

}  // namespace moetrace::cupti
