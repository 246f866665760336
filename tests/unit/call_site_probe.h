// The probe library's functions (call_site_probe.cc): outer calls inner,
// inner calls `callback(arg)`; each returns what the callback returned.
#pragma once

extern "C" bool kvtier_probe_outer(bool (*callback)(void*), void* arg);
extern "C" bool kvtier_probe_inner(bool (*callback)(void*), void* arg);
