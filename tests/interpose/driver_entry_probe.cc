// driver_entry_probe: how a program that reaches the CUDA driver through
// dlopen + dlsym and cuGetProcAddress sees it, with and without kvtier.
// Run with LD_LIBRARY_PATH at the fake driver (fake_driver/fake_libcuda.c);
// the ctests run it under LD_PRELOAD=libkvtier.so and without it.
//   With kvtier:    a hooked driver symbol looked up on libcuda's handle, or
//                   handed out by cuGetProcAddress[_v2], is kvtier's wrapper;
//                   every other symbol is the driver's own pointer; a wrapper
//                   calls the driver's function; a hook whose real function
//                   is missing answers CUDA_ERROR_NOT_FOUND.
//   Without it:     every pointer is the driver's own.
//   Both:           dlsym(RTLD_NEXT) and RTLD_DEFAULT keep their meaning,
//                   failed lookups keep their dlerror() text.
// Prints one line per failed check, then "driver_entry_probe: OK (kvtier
// loaded: yes|no)" and exits 0, or exits 1.
#include <cuda.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <string>

#undef cuGetProcAddress

extern "C" const char* next_probe_who(void) { return "exe"; }
extern "C" void* next_probe_lookup_next(const char* name);  // libnextprobe.so

namespace {

int g_failures = 0;

void Check(bool ok, const std::string& what) {
  if (!ok) {
    printf("FAILED: %s\n", what.c_str());
    ++g_failures;
  }
}

bool FromKvtier(void* p) {
  Dl_info info{};
  return p != nullptr && dladdr(p, &info) && info.dli_fname &&
         strstr(info.dli_fname, "libkvtier") != nullptr;
}

using GetProc2 = CUresult (*)(const char*, void**, int, cuuint64_t,
                              CUdriverProcAddressQueryResult*);
using GetProc1 = CUresult (*)(const char*, void**, int, cuuint64_t);
using Address = void* (*)(const char*);
using Calls = int (*)(const char*);

}  // namespace

int main() {
  const bool kvtier = dlsym(RTLD_DEFAULT, "kvtier_version") != nullptr;
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    printf("FAILED: dlopen(libcuda.so.1): %s (set LD_LIBRARY_PATH to the fake driver)\n",
           dlerror());
    return 1;
  }
  auto fake = reinterpret_cast<Address>(dlsym(lib, "fake_driver_address"));
  auto calls = reinterpret_cast<Calls>(dlsym(lib, "fake_driver_calls"));
  if (fake == nullptr || calls == nullptr) {
    printf("FAILED: libcuda.so.1 is not the fake driver\n");
    return 1;
  }
  // Expected pointer for a hooked symbol: kvtier's export, else the driver's.
  auto hooked = [&](const char* kvtier_name, const char* fake_name) {
    return kvtier ? dlsym(RTLD_DEFAULT, kvtier_name) : fake(fake_name);
  };

  // 1. dlsym on the driver's handle.
  void* gpa2 = dlsym(lib, "cuGetProcAddress_v2");
  Check(gpa2 == hooked("cuGetProcAddress_v2", "cuGetProcAddress_v2"),
        "dlsym(libcuda, cuGetProcAddress_v2)");
  Check(FromKvtier(gpa2) == kvtier, "cuGetProcAddress_v2 comes from kvtier iff preloaded");
  void* gpa1 = dlsym(lib, "cuGetProcAddress");
  Check(gpa1 == hooked("cuGetProcAddress", "cuGetProcAddress"), "dlsym(libcuda, cuGetProcAddress)");
  Check(dlsym(lib, "cuMemAlloc_v2") == hooked("cuMemAlloc_v2", "cuMemAlloc_v2"),
        "dlsym(libcuda, cuMemAlloc_v2)");
  Check(dlsym(lib, "cuGraphCreate") == fake("cuGraphCreate"), "dlsym(libcuda, cuGraphCreate)");
  Check(dlsym(lib, "cuMemAlloc") == fake("cuMemAlloc"), "dlsym(libcuda, cuMemAlloc) (v1)");
  Check(dlsym(lib, "cuNoSuchSymbol") == nullptr, "dlsym of a missing symbol is null");
  const char* err = dlerror();
  Check(err != nullptr && strstr(err, "cuNoSuchSymbol") != nullptr,
        "dlerror names the missing symbol");

  // 2. cuGetProcAddress_v2 (through what dlsym gave).
  auto get2 = reinterpret_cast<GetProc2>(gpa2);
  auto proc = [&](const char* symbol, int version, cuuint64_t flags, CUresult* r = nullptr) {
    void* fn = nullptr;
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
    CUresult res = get2(symbol, &fn, version, flags, &status);
    if (r) *r = res;
    Check(res != CUDA_SUCCESS || status == CU_GET_PROC_ADDRESS_SUCCESS,
          std::string("status of ") + symbol);
    return fn;
  };
  Check(proc("cuMemAlloc", 13000, 0) == hooked("cuMemAlloc_v2", "cuMemAlloc_v2"),
        "cuGetProcAddress_v2(cuMemAlloc, 13000)");
  Check(proc("cuMemAlloc", 3000, 0) == fake("cuMemAlloc"),
        "cuGetProcAddress_v2(cuMemAlloc, 3000) is the driver's v1, untouched");
  Check(proc("cuLaunchKernel", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) ==
            hooked("cuLaunchKernel_ptsz", "cuLaunchKernel_ptsz"),
        "cuGetProcAddress_v2(cuLaunchKernel, per-thread stream)");
  Check(proc("cuLaunchKernel", 13000, 0) == hooked("cuLaunchKernel", "cuLaunchKernel"),
        "cuGetProcAddress_v2(cuLaunchKernel)");
  Check(proc("cuGraphCreate", 13000, 0) == fake("cuGraphCreate"),
        "cuGetProcAddress_v2(cuGraphCreate) is the driver's");
  Check(proc("cuGetExportTable", 13000, 0) == fake("cuGetExportTable"),
        "cuGetProcAddress_v2(cuGetExportTable) is the driver's");
  Check(proc("cuGetProcAddress", 13000, 0) == hooked("cuGetProcAddress_v2", "cuGetProcAddress_v2"),
        "cuGetProcAddress_v2(cuGetProcAddress, 13000)");
  Check(proc("cuGetProcAddress", 11080, 0) == hooked("cuGetProcAddress", "cuGetProcAddress"),
        "cuGetProcAddress_v2(cuGetProcAddress, 11080) is the four-argument one");
  CUresult r = CUDA_SUCCESS;
  void* none = proc("cuNoSuchThing", 13000, 0, &r);
  Check(none == nullptr && r == CUDA_ERROR_NOT_FOUND, "cuGetProcAddress_v2 of a missing symbol");

  // 3. The four-argument cuGetProcAddress.
  void* fn = nullptr;
  Check(reinterpret_cast<GetProc1>(gpa1)("cuMemFree", &fn, 12000, 0) == CUDA_SUCCESS &&
            fn == hooked("cuMemFree_v2", "cuMemFree_v2"),
        "cuGetProcAddress(cuMemFree, 12000)");

  // 4. A handed-out wrapper calls the driver's function and returns its code.
  auto alloc = reinterpret_cast<CUresult (*)(CUdeviceptr*, size_t)>(proc("cuMemAlloc", 13000, 0));
  const int before = calls("cuMemAlloc_v2");
  CUdeviceptr p = 0;
  Check(alloc(&p, 4096) == CUDA_ERROR_NOT_INITIALIZED, "cuMemAlloc_v2 returns the driver's code");
  Check(calls("cuMemAlloc_v2") == before + 1, "cuMemAlloc_v2 reached the driver once");

  // 5. A hook whose real function the driver lacks: "not found", no call.
  if (kvtier) {
    auto managed = reinterpret_cast<CUresult (*)(CUdeviceptr*, size_t, unsigned)>(
        dlsym(RTLD_DEFAULT, "cuMemAllocManaged"));
    Check(managed != nullptr && managed(&p, 4096, CU_MEM_ATTACH_GLOBAL) == CUDA_ERROR_NOT_FOUND,
          "cuMemAllocManaged without a real one is CUDA_ERROR_NOT_FOUND");
  }

  // 6. RTLD_NEXT and RTLD_DEFAULT as glibc defines them.
  auto who_default = reinterpret_cast<const char* (*)()>(dlsym(RTLD_DEFAULT, "next_probe_who"));
  auto who_next = reinterpret_cast<const char* (*)()>(dlsym(RTLD_NEXT, "next_probe_who"));
  Check(who_default && strcmp(who_default(), "exe") == 0, "RTLD_DEFAULT finds the program's");
  Check(who_next && strcmp(who_next(), "lib") == 0,
        "RTLD_NEXT from the program finds the library's");
  Check(next_probe_lookup_next("next_probe_who") == nullptr,
        "RTLD_NEXT from the library finds nothing after it (the caller is the library)");
  Check(next_probe_lookup_next("labs") == dlsym(RTLD_DEFAULT, "labs"),
        "RTLD_NEXT from the library finds libc's labs");

  printf("driver_entry_probe: %s (kvtier loaded: %s)\n", g_failures ? "FAILED" : "OK",
         kvtier ? "yes" : "no");
  return g_failures ? 1 : 0;
}
