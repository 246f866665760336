// CallSite on a real stack: the calling library, the functions above the
// caller, and no lookup before a term asks; and the sym~ term of KVTIER_MATCH
// on known stacks, checked only after the size terms.
#include "runtime/call_site.h"

#include <gtest/gtest.h>

#include <string>

#include "runtime/allocation_matcher.h"
#include "runtime/match.h"
#include "tests/unit/call_site_probe.h"

namespace kvtier {
namespace {

struct Seen {
  std::string lib;
  bool outer = false, inner = false, absent = true;
  int lookups_before = -1;
};

// Called from the probe library, as a hook is from an engine's library.
__attribute__((noinline)) bool Look(void* arg) {
  auto* seen = static_cast<Seen*>(arg);
  CallSite site(__builtin_return_address(0));
  seen->lookups_before = site.lookups();
  seen->lib = site.lib();
  seen->outer = site.StackHas("kvtier_probe_outer");
  seen->inner = site.StackHas("probe_inner");
  seen->absent = site.StackHas("no_function_has_this_name");
  return true;
}

TEST(CallSite, FindsTheCallingLibraryAndTheFunctionsAboveIt) {
  Seen seen;
  ASSERT_TRUE(kvtier_probe_outer(&Look, &seen));
  EXPECT_EQ(seen.lookups_before, 0);
  EXPECT_NE(seen.lib.find("libkvtier_call_site_probe"), std::string::npos) << seen.lib;
  EXPECT_TRUE(seen.outer);
  EXPECT_TRUE(seen.inner);
  EXPECT_FALSE(seen.absent);
}

TEST(CallSite, SymTermsHoldOnTheStackAndRunAfterTheSizeTerms) {
  Result<MatchRule> rule = MatchRule::Parse("size>=64M,sym~llama_kv_cache");
  ASSERT_TRUE(rule.ok()) << rule.status().message();
  CallSite kv("/x/libggml-base.so",
              {"ggml_aligned_malloc", "_ZN14llama_kv_cacheC2ERK11llama_model"});
  CallSite weights("/x/libggml-base.so", {"ggml_aligned_malloc", "llama_model_load"});
  EXPECT_TRUE(rule.value().Matches(128 << 20, 0, kv));
  EXPECT_FALSE(rule.value().Matches(128 << 20, 0, weights));
  EXPECT_FALSE(rule.value().Matches(1 << 20, 0, kv)) << "too small";

  // A small allocation never walks the stack, even with sym~ written first.
  Result<MatchRule> first = MatchRule::Parse("sym~llama_kv_cache,size>=64M");
  ASSERT_TRUE(first.ok());
  CallSite real(__builtin_return_address(0));
  EXPECT_FALSE(first.value().Matches(4096, 0, real));
  EXPECT_EQ(real.lookups(), 0);

  EXPECT_FALSE(MatchRule::Parse("sym>=3").ok());
  EXPECT_FALSE(MatchRule::Parse("sym~").ok());
  Result<AllocationMatcher> m = AllocationMatcher::Parse("size>=64M,sym~llama_kv_cache;none");
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_TRUE(m.value().needs_caller());
  EXPECT_TRUE(m.value().Decide(128 << 20, 0, kv).tier);
  EXPECT_FALSE(m.value().Decide(128 << 20, 1, weights).tier);
}

TEST(CallSite, AMatcherTakesAtMost64Alternatives) {
  std::string rule = "none";
  for (int i = 1; i < 63; ++i) rule += ";none";
  // The 64th alternative (the mask's last bit) decides.
  Result<AllocationMatcher> last = AllocationMatcher::Parse(rule + ";all");
  ASSERT_TRUE(last.ok()) << last.status().message();
  CallSite site("", {});
  AllocationMatcher::Decision d = last.value().Decide(1, 0, site);
  EXPECT_TRUE(d.tier);
  EXPECT_EQ(d.alternative, 63);
  Result<AllocationMatcher> m = AllocationMatcher::Parse(rule + ";none;all");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("at most 64"), std::string::npos) << m.status().message();
}

}  // namespace
}  // namespace kvtier
