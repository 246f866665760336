// HookAddress (hook_table.h): kvtier's own definition of each row, in table
// order. Kept apart from hook_table.cc so the table's unit test can link
// without every hook. Thread-safety: constant.
#include "interpose/hook_table.h"

namespace kvtier::interpose {
namespace {

// Taking the address of a deprecated function (cudaGetDriverEntryPoint) is
// no use of it: kvtier defines the hook because programs still call it.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
void* const kHookAddresses[kHookCount] = {
#define KVTIER_HOOK_ADDRESS_(name) reinterpret_cast<void*>(&::name),
#define KVTIER_CUDART_HOOK(abi, ret, name, params) KVTIER_HOOK_ADDRESS_(name)
#define KVTIER_CUDART_PT_HOOK(abi, name, plain) KVTIER_HOOK_ADDRESS_(name)
#define KVTIER_DRIVER_HOOK(proc, since, name, params) KVTIER_HOOK_ADDRESS_(name)
#define KVTIER_DRIVER_PT_HOOK(proc, since, name, plain) KVTIER_HOOK_ADDRESS_(name)
#include "interpose/hooks.def"
#undef KVTIER_HOOK_ADDRESS_
};
#pragma GCC diagnostic pop

}  // namespace

void* HookAddress(HookId id) { return kHookAddresses[static_cast<int>(id)]; }

}  // namespace kvtier::interpose
