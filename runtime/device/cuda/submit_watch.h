// SubmitWatch: every call of the process that may make a GPU touch memory
// (kernel and graph launches, copies, sets, stream memory operations),
// reported on the calling thread before the call runs and when it returns.
// The CUDA disk tier rests on it (uvm_device.h): a spilled page must be back
// before any GPU work can reach it, and no user-space handler sees a GPU
// fault, so the gate sits where work is submitted.
//
// The production watch is CUPTI's API callbacks (driver and runtime
// domains), enabled for the functions SubmitsWork accepts, and only where a
// disk tier is configured: a process that does not spill pays nothing.
// CUPTI allows one subscriber per process, so the watch cannot start under
// Nsight Systems, Nsight Compute or another CUPTI callback client; the disk
// tier then keeps to what needs no gate (see uvm_device.h).
// Thread-safety: the sink is called from any thread that calls CUDA; Start
// and the destructor from one owner thread.
#pragma once

#include <memory>
#include <string_view>

#include "runtime/status.h"

namespace kvtier::cuda {

class SubmitSink {
 public:
  virtual ~SubmitSink() = default;
  // A call that may make the GPU touch memory is about to run on this thread.
  virtual void OnSubmitEnter() = 0;
  // It returned (its work is queued, not necessarily done).
  virtual void OnSubmitExit() = 0;
};

class SubmitWatch {
 public:
  virtual ~SubmitWatch() = default;
};

// Whether the CUDA function `name` (driver "cu*" or runtime "cuda*", as
// CUPTI names them) may make a GPU read or write memory: launches, copies,
// sets, prefetches, discards, stream memory operations, checkpoints. What
// only queries, allocates, frees, creates, records or synchronises is not.
bool SubmitsWork(std::string_view name);

// Subscribes to CUPTI's callbacks for every function SubmitsWork accepts.
// Fails (with the reason) when libcupti is missing or already has a
// subscriber.
Result<std::unique_ptr<SubmitWatch>> StartCuptiSubmitWatch(SubmitSink* sink);

}  // namespace kvtier::cuda
