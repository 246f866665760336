// PageChecksum: the XXH3-64 of a spilled page, kept in its PageRecord and
// verified on every restore. Thread-safety: pure function.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvtier {

// Picks the fastest XXH3 code path for this CPU at run time (AVX2/AVX-512 on
// x86-64); the value is the same on every path and machine.
uint64_t PageChecksum(const void* data, size_t len);

}  // namespace kvtier
