// CUDA runtime hooks for devices, streams, events and errors.
//
// These only change behaviour on the simulated GPU (KVTIER_BACKEND=sim): one
// device, ordinal 0; streams and events are synchronous fake handles; the
// last error is the simulated runtime's own. In every other mode they call
// the real function unchanged. Thread-safety: any thread.
#include "interpose/cudart_common.h"
#include "interpose/cudart_errors.h"
#include "interpose/hook_table.h"
#include "interpose/preload.h"

using namespace kvtier::interpose;

namespace {

bool Sim(const HookScope& scope) { return scope.mode() == Mode::kSim; }

cudaError_t CheckDevice(int device) { return device == 0 ? cudaSuccess : cudaErrorInvalidDevice; }

}  // namespace

extern "C" {

cudaError_t cudaGetDeviceCount(int* count) {
  HookScope scope;
  if (!Sim(scope)) return CallReal<HookId::cudaGetDeviceCount>(count);
  if (count == nullptr) return SimResult(cudaErrorInvalidValue);
  *count = 1;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  HookScope scope;
  if (!Sim(scope)) return CallReal<HookId::cudaSetDevice>(device);
  return SimResult(CheckDevice(device));
}

cudaError_t cudaGetDevice(int* device) {
  HookScope scope;
  if (!Sim(scope)) return CallReal<HookId::cudaGetDevice>(device);
  if (device == nullptr) return SimResult(cudaErrorInvalidValue);
  *device = 0;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp* prop, int device) {
  HookScope scope;
  if (!Sim(scope)) return CallReal<HookId::cudaGetDeviceProperties>(prop, device);
  if (prop == nullptr) return SimResult(cudaErrorInvalidValue);
  if (device != 0) return SimResult(cudaErrorInvalidDevice);
  TheSimCudaRuntime().Properties(prop);
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, enum cudaDeviceAttr attr, int device) {
  HookScope scope;
  if (!Sim(scope)) return CallReal<HookId::cudaDeviceGetAttribute>(value, attr, device);
  if (value == nullptr) return SimResult(cudaErrorInvalidValue);
  if (device != 0) return SimResult(cudaErrorInvalidDevice);
  return SimResult(TheSimCudaRuntime().Attribute(RawEnum(attr), value));
}

cudaError_t cudaDeviceSynchronize(void) {
  HookScope scope;
  if (!Sim(scope)) return CallReal<HookId::cudaDeviceSynchronize>();
  return cudaSuccess;  // all simulated work is synchronous
}

cudaError_t cudaDriverGetVersion(int* driverVersion) {
  HookScope scope;
  if (!Sim(scope)) return CallReal<HookId::cudaDriverGetVersion>(driverVersion);
  if (driverVersion == nullptr) return SimResult(cudaErrorInvalidValue);
  *driverVersion = CUDART_VERSION;  // a driver exactly as new as the runtime
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* pStream) {
  HookScope scope;
  if (!Sim(scope)) return CallReal<HookId::cudaStreamCreate>(pStream);
  return SimResult(NoThrow([&] { return TheSimCudaRuntime().CreateStream(0, 0, pStream); }));
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* pStream, unsigned int flags) {
  HookScope scope;
  if (!Sim(scope)) return CallReal<HookId::cudaStreamCreateWithFlags>(pStream, flags);
  return SimResult(NoThrow([&] { return TheSimCudaRuntime().CreateStream(flags, 0, pStream); }));
}

cudaError_t cudaStreamCreateWithPriority(cudaStream_t* pStream, unsigned int flags, int priority) {
  HookScope scope;
  if (!Sim(scope)) return CallReal<HookId::cudaStreamCreateWithPriority>(pStream, flags, priority);
  return SimResult(
      NoThrow([&] { return TheSimCudaRuntime().CreateStream(flags, priority, pStream); }));
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  HookScope scope;
  if (!Sim(scope)) return CallReal<HookId::cudaStreamDestroy>(stream);
  return SimResult(TheSimCudaRuntime().DestroyStream(stream));
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  HookScope scope;
  if (!Sim(scope)) return CallReal<HookId::cudaStreamSynchronize>(stream);
  return SimResult(TheSimCudaRuntime().ValidStream(stream) ? cudaSuccess
                                                           : cudaErrorInvalidResourceHandle);
}

cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t stream) {
  HookScope scope;
  if (!Sim(scope)) return CallReal<HookId::cudaStreamSynchronize_ptsz>(stream);
  return SimResult(TheSimCudaRuntime().ValidStream(stream) ? cudaSuccess
                                                           : cudaErrorInvalidResourceHandle);
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  HookScope scope;
  if (!Sim(scope)) return CallReal<HookId::cudaStreamQuery>(stream);
  return SimResult(TheSimCudaRuntime().ValidStream(stream) ? cudaSuccess
                                                           : cudaErrorInvalidResourceHandle);
}

cudaError_t cudaStreamQuery_ptsz(cudaStream_t stream) {
  HookScope scope;
  if (!Sim(scope)) return CallReal<HookId::cudaStreamQuery_ptsz>(stream);
  return SimResult(TheSimCudaRuntime().ValidStream(stream) ? cudaSuccess
                                                           : cudaErrorInvalidResourceHandle);
}

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  HookScope scope;
  if (!Sim(scope)) return CallReal<HookId::cudaEventCreate>(event);
  return SimResult(
      NoThrow([&] { return TheSimCudaRuntime().CreateEvent(cudaEventDefault, event); }));
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  HookScope scope;
  if (!Sim(scope)) return CallReal<HookId::cudaEventCreateWithFlags>(event, flags);
  return SimResult(NoThrow([&] { return TheSimCudaRuntime().CreateEvent(flags, event); }));
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  HookScope scope;
  if (!Sim(scope)) return CallReal<HookId::cudaEventRecord>(event, stream);
  return SimResult(TheSimCudaRuntime().RecordEvent(event, stream, kvtier::MonotonicNs()));
}

cudaError_t cudaEventRecord_ptsz(cudaEvent_t event, cudaStream_t stream) {
  HookScope scope;
  if (!Sim(scope)) return CallReal<HookId::cudaEventRecord_ptsz>(event, stream);
  return SimResult(TheSimCudaRuntime().RecordEvent(event, stream, kvtier::MonotonicNs()));
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  HookScope scope;
  if (!Sim(scope)) return CallReal<HookId::cudaEventSynchronize>(event);
  return SimResult(TheSimCudaRuntime().CheckEvent(event));
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  HookScope scope;
  if (!Sim(scope)) return CallReal<HookId::cudaEventQuery>(event);
  return SimResult(TheSimCudaRuntime().CheckEvent(event));
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  HookScope scope;
  if (!Sim(scope)) return CallReal<HookId::cudaEventElapsedTime>(ms, start, end);
  return SimResult(TheSimCudaRuntime().ElapsedTime(ms, start, end));
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  HookScope scope;
  if (!Sim(scope)) return CallReal<HookId::cudaEventDestroy>(event);
  return SimResult(TheSimCudaRuntime().DestroyEvent(event));
}

cudaError_t cudaGetLastError(void) {
  HookScope scope;
  if (!Sim(scope)) return CallReal<HookId::cudaGetLastError>();
  return TakeLastError();
}

cudaError_t cudaPeekAtLastError(void) {
  HookScope scope;
  if (!Sim(scope)) return CallReal<HookId::cudaPeekAtLastError>();
  return PeekLastError();
}

// On the simulated GPU our own texts come first; other codes (from functions
// kvtier does not simulate) get libcudart's text when it is there.
const char* cudaGetErrorString(cudaError_t error) {
  HookScope scope;
  if (!Sim(scope)) return CallReal<HookId::cudaGetErrorString>(error);
  if (const char* text = SimErrorString(RawEnum(error))) return text;
  auto real = reinterpret_cast<fn::cudaGetErrorString>(ResolveReal(HookId::cudaGetErrorString));
  return real ? real(error) : "unrecognized error code";
}

const char* cudaGetErrorName(cudaError_t error) {
  HookScope scope;
  if (!Sim(scope)) return CallReal<HookId::cudaGetErrorName>(error);
  if (const char* name = SimErrorName(RawEnum(error))) return name;
  auto real = reinterpret_cast<fn::cudaGetErrorName>(ResolveReal(HookId::cudaGetErrorName));
  return real ? real(error) : "unrecognized error code";
}

}  // extern "C"
