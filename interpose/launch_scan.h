// LaunchScan: kernel launches as region-level access evidence.
//
// A kernel that is passed a pointer into a tiered region will (very likely)
// touch that region, so each launch hook (kTier mode) reads the launch's
// parameters and pushes one SignalKind::kLaunch per region referenced into the
// runtime's signal ring (Runtime::PushSignal). The parameter layout comes from
// the driver's cuFuncGetParamInfo (CUDA 12.4+; without it launches are not
// scanned), cached per kernel; every 8-byte-aligned word of every parameter of
// 8 bytes or more is a candidate pointer, so pointers inside structs passed by
// value count too. Cheap filters come first: no regions means no work; a word
// outside [lowest region base, highest region end) is skipped without a
// lookup; a region already reported by this thread in the last millisecond is
// not reported again (a decode step launches the same kernels per layer).
// Thread-safety: any thread. Layouts are cached per thread and in one shared
// table (a mutex, taken only on a thread's cache miss; fork-safe).
#pragma once

#include <cstddef>

#include "interpose/cuda_api.h"

namespace kvtier::interpose {

// Widens the filter range to cover a new region (never narrows it: a stale
// range costs only a lookup).
void NoteRegionRange(const void* base, size_t size);

// A driver launch: `params` is kernelParams (one pointer per parameter) or
// null, then `extra` may carry CU_LAUNCH_PARAM_BUFFER_POINTER.
void ScanDriverLaunch(CUfunction f, void** params, void** extra);
// A runtime launch: `func` is the host stub, `args` one pointer per parameter.
void ScanRuntimeLaunch(const void* func, void** args);

}  // namespace kvtier::interpose
