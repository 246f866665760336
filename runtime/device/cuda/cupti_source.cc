// CuptiSource and DecodeUvmRecord: see cupti_source.h and uvm_event.h.
#include "runtime/device/cuda/cupti_source.h"

#include <cupti_activity.h>
#include <cupti_result.h>
#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "runtime/device/cuda/real_dl.h"
#include "runtime/log.h"

namespace kvtier::cuda {
namespace {

constexpr size_t kBufferBytes = 1 << 20;
constexpr size_t kAlign = 8;  // CUPTI's required buffer alignment
constexpr size_t kBatch = 256;

// The one active source's sink (CUPTI's callbacks take no user data).
std::atomic<UvmEventSink*> g_sink{nullptr};

UvmEvent::Cause CauseOf(uint32_t flags) {
  switch (flags) {
    case CUPTI_ACTIVITY_UNIFIED_MEMORY_MIGRATION_CAUSE_USER:
      return UvmEvent::Cause::kUser;
    case CUPTI_ACTIVITY_UNIFIED_MEMORY_MIGRATION_CAUSE_COHERENCE:
      return UvmEvent::Cause::kCoherence;
    case CUPTI_ACTIVITY_UNIFIED_MEMORY_MIGRATION_CAUSE_PREFETCH:
      return UvmEvent::Cause::kDriverPrefetch;
    case CUPTI_ACTIVITY_UNIFIED_MEMORY_MIGRATION_CAUSE_EVICTION:
      return UvmEvent::Cause::kEviction;
    case CUPTI_ACTIVITY_UNIFIED_MEMORY_MIGRATION_CAUSE_ACCESS_COUNTERS:
      return UvmEvent::Cause::kAccessCounters;
    default:
      return UvmEvent::Cause::kUnknown;
  }
}

}  // namespace

bool DecodeUvmRecord(const void* record, UvmEvent* out) {
  // The prefix shared by ...Counter, ...Counter2 and ...Counter3.
  CUpti_ActivityUnifiedMemoryCounter3 r{};
  memcpy(&r, record, offsetof(CUpti_ActivityUnifiedMemoryCounter3, pad));
  if (r.kind != CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER) return false;
  UvmEvent e;
  e.address = r.address;
  e.start_ns = r.start;
  e.end_ns = r.end;
  switch (r.counterKind) {
    case CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_GPU_PAGE_FAULT:
      e.kind = UvmEvent::Kind::kGpuFault;
      break;
    case CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_HTOD:
      e.kind = UvmEvent::Kind::kToDevice;
      e.bytes = r.value;
      e.cause = CauseOf(r.flags);
      break;
    case CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_DTOH:
      e.kind = UvmEvent::Kind::kToHost;
      e.bytes = r.value;
      e.cause = CauseOf(r.flags);
      break;
    case CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_THRASHING:
      e.kind = UvmEvent::Kind::kThrashing;
      e.bytes = r.value;
      break;
    default:
      return false;
  }
  *out = e;
  return true;
}

struct CuptiSource::Api {
  void* library = nullptr;
  CUptiResult (*configure)(CUpti_ActivityUnifiedMemoryCounterConfig*, uint32_t) = nullptr;
  CUptiResult (*register_callbacks)(CUpti_BuffersCallbackRequestFunc,
                                    CUpti_BuffersCallbackCompleteFunc) = nullptr;
  CUptiResult (*enable)(CUpti_ActivityKind) = nullptr;
  CUptiResult (*disable)(CUpti_ActivityKind) = nullptr;
  CUptiResult (*flush_all)(uint32_t) = nullptr;
  CUptiResult (*next_record)(uint8_t*, size_t, CUpti_Activity**) = nullptr;
  CUptiResult (*result_string)(CUptiResult, const char**) = nullptr;

  std::string Describe(CUptiResult r) const {
    const char* s = nullptr;
    if (result_string && result_string(r, &s) == CUPTI_SUCCESS && s) return s;
    return "CUptiResult " + std::to_string(static_cast<int>(r));
  }
};

namespace {

// CUPTI's thread asks for a buffer to fill.
void CUPTIAPI BufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(aligned_alloc(kAlign, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;  // as many as fit
}

std::atomic<CuptiSource::Api*> g_api{nullptr};  // set while a source is active

// A filled buffer comes back: decode, deliver in batches, free.
void CUPTIAPI BufferCompleted(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  UvmEventSink* sink = g_sink.load(std::memory_order_acquire);
  CuptiSource::Api* api = g_api.load(std::memory_order_acquire);
  if (sink != nullptr && api != nullptr && buffer != nullptr) {
    UvmEvent batch[kBatch];
    size_t n = 0;
    CUpti_Activity* record = nullptr;
    while (api->next_record(buffer, valid, &record) == CUPTI_SUCCESS) {
      if (DecodeUvmRecord(record, &batch[n]) && ++n == kBatch) {
        sink->OnUvmEvents(batch, n);
        n = 0;
      }
    }
    if (n != 0) sink->OnUvmEvents(batch, n);
  }
  free(buffer);
}

template <typename Fn>
bool Resolve(void* lib, const char* name, Fn* out) {
  *out = reinterpret_cast<Fn>(RealDlsym(lib, name));
  return *out != nullptr;
}

}  // namespace

Result<std::unique_ptr<CuptiSource>> CuptiSource::Start(UvmEventSink* sink) {
  auto api = std::make_unique<Api>();
  for (const char* soname : {"libcupti.so.13", "libcupti.so.12", "libcupti.so"}) {
    api->library = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (api->library != nullptr) break;
  }
  if (api->library == nullptr) {
    return Status::Error(
        "no CUPTI library (libcupti.so.13/.12): GPU page faults are not observed; add the CUDA "
        "toolkit's lib64 (or extras/CUPTI/lib64) to LD_LIBRARY_PATH");
  }
  void* lib = api->library;
  if (!Resolve(lib, "cuptiActivityConfigureUnifiedMemoryCounter", &api->configure) ||
      !Resolve(lib, "cuptiActivityRegisterCallbacks", &api->register_callbacks) ||
      !Resolve(lib, "cuptiActivityEnable", &api->enable) ||
      !Resolve(lib, "cuptiActivityDisable", &api->disable) ||
      !Resolve(lib, "cuptiActivityFlushAll", &api->flush_all) ||
      !Resolve(lib, "cuptiActivityGetNextRecord", &api->next_record)) {
    return Status::Error("the CUPTI library lacks the activity API kvtier uses");
  }
  Resolve(lib, "cuptiGetResultString", &api->result_string);
  UvmEventSink* expected = nullptr;
  if (!g_sink.compare_exchange_strong(expected, sink)) {
    return Status::Error("another CUPTI unified-memory source is already active in this process");
  }
  CUpti_ActivityUnifiedMemoryCounterConfig config[4] = {};
  const CUpti_ActivityUnifiedMemoryCounterKind kinds[4] = {
      CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_GPU_PAGE_FAULT,
      CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_HTOD,
      CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_DTOH,
      CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_THRASHING};
  for (int i = 0; i < 4; ++i) {
    config[i].scope = CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_SCOPE_PROCESS_ALL_DEVICES;
    config[i].kind = kinds[i];
    config[i].deviceId = 0;
    config[i].enable = 1;
  }
  CUptiResult r = api->configure(config, 4);
  if (r == CUPTI_SUCCESS) r = api->register_callbacks(BufferRequested, BufferCompleted);
  g_api.store(api.get(), std::memory_order_release);
  if (r == CUPTI_SUCCESS) r = api->enable(CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER);
  if (r != CUPTI_SUCCESS) {
    g_api.store(nullptr, std::memory_order_release);
    g_sink.store(nullptr, std::memory_order_release);
    return Status::Error("CUPTI unified-memory counters are not available here (" +
                         api->Describe(r) + "): GPU page faults are not observed");
  }
  std::unique_ptr<CuptiSource> source(new CuptiSource());
  source->api_ = std::move(api);
  return source;
}

CuptiSource::~CuptiSource() {
  api_->disable(CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER);
  api_->flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  g_sink.store(nullptr, std::memory_order_release);
  g_api.store(nullptr, std::memory_order_release);
}

void CuptiSource::Flush(bool forced) {
  api_->flush_all(forced ? CUPTI_ACTIVITY_FLAG_FLUSH_FORCED : 0);
}

}  // namespace kvtier::cuda
