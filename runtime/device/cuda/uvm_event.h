// UvmEvent: one unified-memory event the driver reported (through CUPTI), in
// the form the CUDA backend applies to its page records.
//
// CUPTI delivers CUpti_ActivityUnifiedMemoryCounter records asynchronously, in
// buffers, on its own thread: they are evidence of what the driver did some
// time ago (a GPU fault on a page, a migration and its cause, thrashing), not
// a callback inside the fault. DecodeUvmRecord reads the fields every record
// version since CUDA 7 has in the same place (kind .. flags), so a newer or
// older libcupti than the headers works too.
// Thread-safety: value types and a pure function.
#pragma once

#include <cstdint>

namespace kvtier::cuda {

struct UvmEvent {
  enum class Kind : uint8_t {
    kGpuFault,   // a GPU touched a page that was not mapped for it
    kToDevice,   // bytes migrated host -> device
    kToHost,     // bytes migrated device -> host
    kThrashing,  // the driver saw a range migrate back and forth
  };
  // Why bytes moved (transfers only).
  enum class Cause : uint8_t {
    kUnknown,
    kUser,
    kCoherence,
    kDriverPrefetch,
    kEviction,
    kAccessCounters
  };

  Kind kind = Kind::kGpuFault;
  Cause cause = Cause::kUnknown;
  uint64_t address = 0;  // the faulting page, or the first byte moved
  uint64_t bytes = 0;    // transfers and thrashing: bytes; faults: 0
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;  // faults: when the driver replayed the access
};

// Decodes one CUPTI activity record; false for records of another kind or a
// counter kind the backend does not use.
bool DecodeUvmRecord(const void* record, UvmEvent* out);

}  // namespace kvtier::cuda
