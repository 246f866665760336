// PageChecksum over libxxhash. Thread-safety: pure function.
#include "runtime/storage/checksum.h"

#if defined(__x86_64__)
#include <xxh_x86dispatch.h>
#else
#include <xxhash.h>
#endif

namespace kvtier {

uint64_t PageChecksum(const void* data, size_t len) {
#if defined(__x86_64__)
  return XXH3_64bits_dispatch(data, len);
#else
  return XXH3_64bits(data, len);
#endif
}

}  // namespace kvtier
