// The policies KVTIER_POLICY can name. Add a row to add a policy.
#include <functional>
#include <string_view>
#include <vector>

#include "policies/lru.h"
#include "runtime/policy.h"

namespace kvtier {
namespace {

struct Entry {
  std::string_view name;
  std::function<std::unique_ptr<Policy>()> make;
};

const std::vector<Entry>& Entries() {
  static const std::vector<Entry> entries = {
      {"lru", [] { return std::make_unique<LruPolicy>(); }},
  };
  return entries;
}

}  // namespace

std::unique_ptr<Policy> MakePolicy(std::string_view name) {
  for (const Entry& e : Entries()) {
    if (e.name == name) return e.make();
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
