// Units and values as people write and read them: byte sizes in options,
// match rules and command lines, byte counts in summaries, kvtier-top and the
// bench, and values echoed in error messages. The runtime, the bench and the
// tools all use these, so "2M" means the same and "1.5 GiB" reads the same
// everywhere.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "runtime/status.h"

namespace kvtier {

// A size: a decimal integer with an optional suffix K, M, G, T (powers of
// 1024), also KB/KiB, MB/MiB, GB/GiB, TB/TiB, B; case-insensitive; no
// fractions ("1536M", not "1.5G"); fails on overflow.
Result<uint64_t> ParseSize(std::string_view text);

// Bytes with at most two decimals, trailing zeros dropped: "2 MiB",
// "1.5 GiB", "870.81 MiB" (summaries and messages).
std::string FormatBytes(uint64_t bytes);
// Bytes with three significant digits: "512 MiB", "1.50 GiB", "32.0 GiB"
// (figures that line up in columns: kvtier-top).
std::string FormatBytesRounded(uint64_t bytes);

// A value as an error message shows it: printable ASCII as is, any other
// byte as \xNN, and at most 64 characters ("..." ends a longer one), so
// hostile input cannot fill or garble the one-line message.
std::string EchoValue(std::string_view text);

}  // namespace kvtier
