// Building blocks the policies share (see policy_util.h).
#include "policies/policy_util.h"

namespace kvtier {

uint64_t BytesOverWatermark(const TierUsage& usage) {
  if (usage.budget == 0 || usage.used <= usage.high) return 0;
  return usage.used > usage.low ? usage.used - usage.low : 0;
}

}  // namespace kvtier
