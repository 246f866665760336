// CuptiSource: unified-memory events from CUPTI, delivered to a sink.
//
// Loads libcupti (libcupti.so.13, .so.12 or .so) at run time, configures the
// unified-memory counters the backend uses (GPU page faults, host<->device
// bytes, thrashing) and enables CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER.
// CUPTI hands each completed buffer to a callback, which decodes the records
// (uvm_event.h) and passes them to the sink in batches; the owner calls
// Flush periodically so that records arrive within a flush period.
// CUPTI's activity API is process-wide with no per-client context, so one
// CuptiSource may be active at a time (Start fails for a second one).
// Thread-safety: Start, Flush and the destructor from the owner's threads;
// the sink is called from CUPTI's thread or the thread calling Flush, with no
// CuptiSource state locked.
#pragma once

#include <cstddef>
#include <memory>

#include "runtime/device/cuda/uvm_event.h"
#include "runtime/status.h"

namespace kvtier::cuda {

class UvmEventSink {
 public:
  virtual ~UvmEventSink() = default;
  virtual void OnUvmEvents(const UvmEvent* events, size_t count) = 0;
};

class CuptiSource {
 public:
  // Fails (with the reason) when libcupti is missing or unified-memory
  // profiling is not supported here (some virtualised GPUs, MPS clients).
  static Result<std::unique_ptr<CuptiSource>> Start(UvmEventSink* sink);
  ~CuptiSource();
  CuptiSource(const CuptiSource&) = delete;
  CuptiSource& operator=(const CuptiSource&) = delete;

  // Hands the records of every completed buffer to the sink (forced: also
  // the partly filled ones).
  void Flush(bool forced);

  struct Api;  // the libcupti functions (cupti_source.cc)

 private:
  CuptiSource() = default;
  std::unique_ptr<Api> api_;
};

}  // namespace kvtier::cuda
