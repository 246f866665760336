// The policies KVTIER_POLICY can name (see registry.h). Add a row to add a policy.
#include "policies/registry.h"

#include <functional>
#include <string_view>
#include <vector>

#include "policies/cost_aware.h"
#include "policies/lfu_aging.h"
#include "policies/lru.h"
#include "policies/predictive.h"
#include "policies/s3fifo.h"

namespace kvtier {
namespace {

struct Entry {
  std::string_view name;
  std::function<std::unique_ptr<Policy>(const TieringOptions&, const PolicySettings&)> make;
};

const std::vector<Entry>& Entries() {
  static const std::vector<Entry> entries = {
      {"lru",
       [](const TieringOptions&, const PolicySettings&) { return std::make_unique<LruPolicy>(); }},
      {"lfu-aging", [](const TieringOptions& o,
                       const PolicySettings&) { return std::make_unique<LfuAgingPolicy>(o); }},
      {"s3fifo", [](const TieringOptions& o,
                    const PolicySettings&) { return std::make_unique<S3FifoPolicy>(o); }},
      {"cost-aware", [](const TieringOptions& o,
                        const PolicySettings&) { return std::make_unique<CostAwarePolicy>(o); }},
      {"predictive",
       [](const TieringOptions&, const PolicySettings& s) {
         PredictiveOptions p;
         p.predict = s.predict;
         return std::make_unique<PredictivePolicy>(p);
       }},
  };
  return entries;
}

}  // namespace

std::unique_ptr<Policy> MakePolicy(std::string_view name, const PolicySettings& settings) {
  TieringOptions options;
  for (const Entry& e : Entries()) {
    if (e.name == name) return e.make(options, settings);
  }
  return nullptr;
}

const std::vector<std::string_view>& PolicyNames() {
  static const std::vector<std::string_view> names = [] {
    std::vector<std::string_view> v;
    for (const Entry& e : Entries()) v.push_back(e.name);
    return v;
  }();
  return names;
}

}  // namespace kvtier
