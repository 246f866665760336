// SubmitsWork and the CUPTI submit watch: see submit_watch.h.
#include "runtime/device/cuda/submit_watch.h"

#include <cupti_callbacks.h>
#include <cupti_driver_cbid.h>
#include <cupti_result.h>
#include <cupti_runtime_cbid.h>
#include <dlfcn.h>

#include <string>

#include "runtime/device/cuda/real_dl.h"

namespace kvtier::cuda {

bool SubmitsWork(std::string_view name) {
  if (!name.starts_with("cu")) return false;
  // What enqueues GPU work that reads or writes memory it was handed, by the
  // words CUDA names such calls with (cuLaunchKernel, cudaGraphLaunch,
  // cuMemcpyDtoHAsync_v2, cudaMemset2D, cuStreamWriteValue32,
  // cuStreamBatchMemOp, cuMemPrefetchBatchAsync, cuCheckpointProcessCheckpoint).
  for (std::string_view word : {"Launch", "Memcpy", "Memset", "MemPrefetch", "MemDiscard",
                                "WriteValue", "WaitValue", "BatchMemOp", "Checkpoint"}) {
    if (name.find(word) != std::string_view::npos) return true;
  }
  return false;
}

namespace {

struct Cupti {
  CUptiResult (*subscribe)(CUpti_SubscriberHandle*, CUpti_CallbackFunc, void*) = nullptr;
  CUptiResult (*unsubscribe)(CUpti_SubscriberHandle) = nullptr;
  CUptiResult (*enable_callback)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain,
                                 CUpti_CallbackId) = nullptr;
  CUptiResult (*callback_name)(CUpti_CallbackDomain, uint32_t, const char**) = nullptr;
};

template <typename Fn>
bool Resolve(void* lib, const char* name, Fn* out) {
  *out = reinterpret_cast<Fn>(RealDlsym(lib, name));
  return *out != nullptr;
}

class CuptiSubmitWatch final : public SubmitWatch {
 public:
  CuptiSubmitWatch(const Cupti& api, CUpti_SubscriberHandle handle) : api_(api), handle_(handle) {}
  ~CuptiSubmitWatch() override { api_.unsubscribe(handle_); }

  static void CUPTIAPI Callback(void* userdata, CUpti_CallbackDomain, CUpti_CallbackId,
                                const void* data) {
    auto* sink = static_cast<SubmitSink*>(userdata);
    const auto* info = static_cast<const CUpti_CallbackData*>(data);
    if (info->callbackSite == CUPTI_API_ENTER) {
      sink->OnSubmitEnter();
    } else {
      sink->OnSubmitExit();
    }
  }

 private:
  const Cupti api_;
  const CUpti_SubscriberHandle handle_;
};

}  // namespace

Result<std::unique_ptr<SubmitWatch>> StartCuptiSubmitWatch(SubmitSink* sink) {
  void* lib = nullptr;
  for (const char* soname : {"libcupti.so.13", "libcupti.so.12", "libcupti.so"}) {
    lib = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (lib != nullptr) break;
  }
  if (lib == nullptr) {
    return Status::Error(
        "no CUPTI library (libcupti.so.13/.12) to see GPU work submitted; add the CUDA toolkit's "
        "lib64 to LD_LIBRARY_PATH");
  }
  Cupti api;
  if (!Resolve(lib, "cuptiSubscribe", &api.subscribe) ||
      !Resolve(lib, "cuptiUnsubscribe", &api.unsubscribe) ||
      !Resolve(lib, "cuptiEnableCallback", &api.enable_callback) ||
      !Resolve(lib, "cuptiGetCallbackName", &api.callback_name)) {
    return Status::Error("the CUPTI library lacks the callback API");
  }
  CUpti_SubscriberHandle handle = nullptr;
  CUptiResult r = api.subscribe(&handle, CuptiSubmitWatch::Callback, sink);
  if (r != CUPTI_SUCCESS) {
    return Status::Errorf(
        "CUPTI refused a callback subscriber (CUptiResult %d; Nsight Systems, Nsight Compute or "
        "another profiler may hold the one CUPTI allows)",
        static_cast<int>(r));
  }
  auto watch = std::make_unique<CuptiSubmitWatch>(api, handle);
  int enabled = 0;
  const struct {
    CUpti_CallbackDomain domain;
    uint32_t size;
  } domains[] = {{CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_SIZE},
                 {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_SIZE}};
  for (const auto& d : domains) {
    for (uint32_t cbid = 1; cbid < d.size; ++cbid) {
      const char* name = nullptr;
      if (api.callback_name(d.domain, cbid, &name) != CUPTI_SUCCESS || name == nullptr ||
          !SubmitsWork(name)) {
        continue;
      }
      if (api.enable_callback(1, handle, d.domain, cbid) != CUPTI_SUCCESS) {
        return Status::Errorf("CUPTI would not report %s", name);
      }
      ++enabled;
    }
  }
  if (enabled == 0) return Status::Error("CUPTI names no launch or copy function");
  return std::unique_ptr<SubmitWatch>(std::move(watch));
}

}  // namespace kvtier::cuda
