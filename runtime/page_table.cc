// Names of tiers, for messages and tools.
#include "runtime/page_table.h"

namespace kvtier {

const char* TierName(Tier t) {
  switch (t) {
    case Tier::kDevice:
      return "device";
    case Tier::kHost:
      return "host";
    case Tier::kDisk:
      return "disk";
    case Tier::kUntouched:
      return "untouched";
  }
  return "?";
}

}  // namespace kvtier
