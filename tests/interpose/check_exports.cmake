# ctest preload_exports: what libkvtier.so exports and what a CUDA 13 program
# imports.
#   cmake -DNM=nm -DLIB=libkvtier.so -DPROBE=cudart_probe -P check_exports.cmake
# 1. libkvtier.so defines only CUDA runtime and driver hooks, dlsym, the
#    heap functions and memset of the host backend and kvtier_* in its dynamic symbol
#    table; runtime hooks with the CUDA 13 ABI
#    carry @@libcudart.so.13, the others (and every driver hook) no version
#    at all.
# 2. The probe (linked against the real libcudart.so.13) imports versioned
#    references, cudaGetDeviceCount@libcudart.so.13: the preload tests that run
#    it show those bind to the unversioned definitions.
execute_process(COMMAND ${NM} -D --defined-only ${LIB} OUTPUT_VARIABLE lib_syms RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${NM} -D ${LIB} failed")
endif()
string(REPLACE "\n" ";" lines "${lib_syms}")
set(bad "")
foreach(line ${lines})
  if(line STREQUAL "")
    continue()
  endif()
  string(REGEX REPLACE "^[0-9a-fA-F]+ +[A-Za-z] +" "" sym "${line}")
  # The version node itself (llvm-nm prints it as libcudart.so.13@@...), and
  # the linker's own section markers, which a TSan link exports.
  if(sym MATCHES "^(libcudart\\.so\\.13(@@libcudart\\.so\\.13)?|__bss_start|_edata|_end)$")
    continue()
  endif()
  if(NOT sym MATCHES "^(cuda[A-Za-z0-9_]+(@@libcudart\\.so\\.13)?|cu[A-Z][A-Za-z0-9_]+|dlsym|kvtier_[a-z_]+|malloc|free|calloc|realloc|posix_memalign|aligned_alloc|memalign|valloc|pvalloc|malloc_usable_size|memset)$")
    list(APPEND bad "${sym}")
  endif()
endforeach()
if(bad)
  message(FATAL_ERROR "libkvtier.so exports symbols that are neither CUDA hooks, dlsym, heap functions nor kvtier_*: ${bad}")
endif()
foreach(expected " T cudaMalloc\n" " T cudaFree\n" " T cudaMemPrefetchAsync@@libcudart.so.13\n"
                 " T cudaMemAdvise@@libcudart.so.13\n" " T cudaGetDeviceProperties@@libcudart.so.13\n"
                 " T cuMemAlloc_v2\n" " T cuGetProcAddress\n" " T cuGetProcAddress_v2\n"
                 " T cuLaunchKernel_ptsz\n" " T dlsym\n" " T kvtier_hint\n" " T kvtier_wait\n" " T malloc\n" " T free\n"
                 " T posix_memalign\n")
  string(FIND "${lib_syms}" "${expected}" at)
  if(at EQUAL -1)
    string(STRIP "${expected}" what)
    message(FATAL_ERROR "libkvtier.so does not export '${what}'. Exports:\n${lib_syms}")
  endif()
endforeach()

execute_process(COMMAND ${NM} -D ${PROBE} OUTPUT_VARIABLE probe_syms RESULT_VARIABLE rc)
if(NOT probe_syms MATCHES " U cudaGetDeviceCount@libcudart\\.so\\.13\n")
  message(FATAL_ERROR "${PROBE} does not import cudaGetDeviceCount@libcudart.so.13:\n${probe_syms}")
endif()
message(STATUS "exports ok: only hooks, dlsym and kvtier_*; CUDA 13-ABI hooks versioned; the probe imports versioned symbols")
