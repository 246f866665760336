// KVTIER_MATCH grammar: table of rules and allocations, and every error path.
#include "runtime/match.h"

#include <gtest/gtest.h>

namespace kvtier {
namespace {

struct Case {
  const char* rule;
  uint64_t size;
  uint64_t index;
  const char* lib;
  bool match;
};

TEST(MatchRule, Table) {
  const Case cases[] = {
      {"size>=64M", 64ull << 20, 0, "", true},
      {"size>=64M", (64ull << 20) - 1, 0, "", false},
      {"size>64M", 64ull << 20, 0, "", false},
      {"size<1G", 1ull << 30, 0, "", false},
      {"size<=1G", 1ull << 30, 0, "", true},
      {"size>=1M,size<2M", 1536 << 10, 0, "", true},
      {"size>=1M,size<2M", 2 << 20, 0, "", false},
      {"index>=8", 100, 7, "", false},
      {"index>=8", 100, 8, "", true},
      {"index<3", 100, 2, "", true},
      {"lib~libtorch", 1, 0, "/x/libtorch_cuda.so", true},
      {"lib~libtorch", 1, 0, "/x/libggml.so", false},
      {"lib~libtorch", 1, 0, "", false},
      {"all", 1, 0, "", true},
      {"none", 1ull << 40, 0, "", false},
      {" size >= 2M , index >= 1 ", 2 << 20, 1, "", true},
  };
  for (const Case& c : cases) {
    Result<MatchRule> r = MatchRule::Parse(c.rule);
    ASSERT_TRUE(r.ok()) << c.rule << ": " << r.status().message();
    CallSite site(c.lib, {});
    EXPECT_EQ(r.value().Matches(c.size, c.index, site), c.match)
        << c.rule << " size=" << c.size << " index=" << c.index << " lib=" << c.lib;
  }
}

TEST(MatchRule, MinSizeIsTheLargestLowerBoundOfItsSizeTerms) {
  auto min = [](const char* text) {
    Result<MatchRule> r = MatchRule::Parse(text);
    EXPECT_TRUE(r.ok()) << text;
    return r.ok() ? r.value().MinSize() : 0;
  };
  EXPECT_EQ(min("all"), 0u);
  EXPECT_EQ(min("size>=1M"), uint64_t{1} << 20);
  EXPECT_EQ(min("size>4096"), 4097u);
  EXPECT_EQ(min("size>=1M,size>=64M,lib~ggml"), uint64_t{64} << 20);
  EXPECT_EQ(min("size<=1G,index>=3"), 0u) << "upper bounds and indexes set no minimum";
  EXPECT_EQ(min("none"), UINT64_MAX);
}

TEST(MatchRule, NeedsCallerOnlyForLibTerms) {
  EXPECT_FALSE(MatchRule::Parse("size>=1M").value().needs_caller());
  EXPECT_TRUE(MatchRule::Parse("size>=1M,lib~torch").value().needs_caller());
}

TEST(MatchRule, ErrorsNameTheTermAndTheForm) {
  const char* bad[] = {
      "",          "  ",        "size",   "size>=",    "size>=12Q",         "size~x",
      "index>=-1", "index>=1x", "lib>=3", "colour>=1", "size>=1M,,index<2", "all,"};
  for (const char* rule : bad) {
    Result<MatchRule> r = MatchRule::Parse(rule);
    EXPECT_FALSE(r.ok()) << "accepted bad rule '" << rule << "'";
    if (!r.ok()) {
      EXPECT_NE(r.status().message().find("accepted:"), std::string::npos) << r.status().message();
    }
  }
}

}  // namespace
}  // namespace kvtier

// The option table's default is the rule allocation_matcher.h documents and tests.
#include "runtime/allocation_matcher.h"
#include "runtime/options.h"

namespace kvtier {
namespace {

TEST(MatchDefault, OptionTableUsesTheDocumentedDefaultRule) {
  for (const OptionInfo& row : OptionTable()) {
    if (std::string_view(row.field) == "match") {
      EXPECT_STREQ(row.def, kDefaultRule);
      EXPECT_TRUE(AllocationMatcher::Parse(row.def).ok());
      return;
    }
  }
  FAIL() << "no match row in the option table";
}

// The host backend's heap hooks turn away blocks below this before anything
// else is looked at: the smallest minimum of the alternatives.
TEST(MatchDefault, TheMatcherMinimumIsTheLeastOfItsAlternatives) {
  EXPECT_EQ(AllocationMatcher::Parse(kDefaultRule).value().min_size(), uint64_t{1} << 20);
  EXPECT_EQ(AllocationMatcher::Parse("size>=8M;size>=2M,lib~x").value().min_size(),
            uint64_t{2} << 20);
  EXPECT_EQ(AllocationMatcher::Parse("size>=8M;all").value().min_size(), 0u);
  EXPECT_EQ(AllocationMatcher::Parse("none").value().min_size(), UINT64_MAX);
}

// Found by the match fuzz target: a long term of control and high bytes
// filled the message, cutting off the accepted form.
TEST(MatchRule, AHostileTermLeavesTheMessageWhole) {
  const std::string term = "size>=\t\t9999" + std::string(300, '\xf5') + std::string(200, 'a');
  for (const std::string& rule : {term, "size>=1M;" + term + ",run>=2"}) {
    Result<AllocationMatcher> r = AllocationMatcher::Parse(rule);
    ASSERT_FALSE(r.ok());
    const std::string message = r.status().message();
    EXPECT_NE(message.find("(accepted: "), std::string::npos) << message;
    EXPECT_EQ(message.back(), ')') << message;
    EXPECT_NE(message.find("\\xf5"), std::string::npos) << message;
    EXPECT_LT(message.size(), 400u) << message;
  }
}

}  // namespace
}  // namespace kvtier
