// AllocationMatcher: parser and evaluator (grammar in allocation_matcher.h).
#include "runtime/allocation_matcher.h"

#include <algorithm>
#include <charconv>

#include "runtime/units.h"

namespace kvtier {
namespace {

constexpr const char* kForm =
    "alternatives joined by ';', each of terms joined by ',' such as size>=64M, index>=8, "
    "lib~ggml, sym~llama_kv_cacheC, run>=3, nth>=1, nth<2, all, none";

// Splits on `sep`, keeping empty pieces (they are errors).
std::vector<std::string_view> Split(std::string_view text, char sep) {
  std::vector<std::string_view> out;
  for (;;) {
    size_t at = text.find(sep);
    out.push_back(TrimBlanks(text.substr(0, at)));
    if (at == std::string_view::npos) return out;
    text.remove_prefix(at + 1);
  }
}

}  // namespace

// Moves happen while a matcher is built, before any thread shares it; the
// locks cost nothing there and keep alternatives_ checked everywhere.
AllocationMatcher::AllocationMatcher(AllocationMatcher&& other) noexcept
    : needs_caller_(other.needs_caller_) {
  MutexLock lock(&other.mu_);
  MutexLock mine(&mu_);
  alternatives_ = std::move(other.alternatives_);
  bases_ = std::move(other.bases_);
}

AllocationMatcher& AllocationMatcher::operator=(AllocationMatcher&& other) noexcept {
  if (this == &other) return *this;
  MutexLock lock(&other.mu_);
  MutexLock mine(&mu_);
  alternatives_ = std::move(other.alternatives_);
  bases_ = std::move(other.bases_);
  needs_caller_ = other.needs_caller_;
  return *this;
}

uint64_t AllocationMatcher::min_size() const {
  uint64_t least = UINT64_MAX;
  for (const MatchRule& base : bases_) least = std::min(least, base.MinSize());
  return least;
}

Result<AllocationMatcher> AllocationMatcher::Parse(std::string_view text) {
  AllocationMatcher matcher;
  if (TrimBlanks(text).empty()) return Status::Errorf("empty match rule (accepted: %s)", kForm);
  const std::vector<std::string_view> alternatives = Split(text, ';');
  if (alternatives.size() > kMaxAlternatives) {
    return Status::Errorf("%zu alternatives: at most %zu (accepted: %s)", alternatives.size(),
                          kMaxAlternatives, kForm);
  }
  for (std::string_view alt_text : alternatives) {
    if (alt_text.empty())
      return Status::Errorf("empty alternative between ';' (accepted: %s)", kForm);
    Alternative alt;
    std::string base;
    for (std::string_view term : Split(alt_text, ',')) {
      auto bad = [&](const char* why) {
        return Status::Errorf("match term '%s': %s (accepted: %s)", EchoValue(term).c_str(), why,
                              kForm);
      };
      const bool is_run = term.starts_with("run");
      const bool is_nth = term.starts_with("nth");
      if (!is_run && !is_nth) {  // match.h's term: checked by MatchRule::Parse below
        if (!base.empty()) base += ',';
        base += term;
        continue;
      }
      std::string_view rest = TrimBlanks(term.substr(3));
      Count c{is_run, Op::kGe, 0};
      if (rest.starts_with(">="))
        c.op = Op::kGe, rest.remove_prefix(2);
      else if (rest.starts_with("<="))
        c.op = Op::kLe, rest.remove_prefix(2);
      else if (rest.starts_with(">"))
        c.op = Op::kGt, rest.remove_prefix(1);
      else if (rest.starts_with("<"))
        c.op = Op::kLt, rest.remove_prefix(1);
      else
        return bad(is_run ? "run takes >=" : "nth takes >=, >, <= or <");
      if (is_run && c.op != Op::kGe) return bad("run takes >= (a run of at least N)");
      rest = TrimBlanks(rest);
      auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), c.value);
      if (rest.empty() || ec != std::errc() || end != rest.data() + rest.size()) {
        return bad("the value must be a whole number");
      }
      if (is_run && c.value < 2) return bad("a run is at least 2 allocations");
      alt.counts.push_back(c);
    }
    Result<MatchRule> rule = MatchRule::Parse(base.empty() ? "all" : base);
    if (!rule.ok()) return rule.status();
    matcher.needs_caller_ |= rule.value().needs_caller();
    matcher.bases_.push_back(std::move(rule).value());
    MutexLock lock(&matcher.mu_);
    matcher.alternatives_.push_back(std::move(alt));
  }
  return matcher;
}

AllocationMatcher::Decision AllocationMatcher::Decide(uint64_t size, uint64_t index,
                                                      CallSite& caller) {
  // The stateless terms first, without the lock: looking up the caller may
  // walk the stack, which may allocate (and so come back here).
  uint64_t passed = 0;
  for (size_t i = 0; i < bases_.size(); ++i) {
    if (bases_[i].Matches(size, index, caller)) passed |= uint64_t{1} << i;
  }
  Decision d;
  MutexLock lock(&mu_);
  for (size_t i = 0; i < alternatives_.size(); ++i) {
    Alternative& alt = alternatives_[i];
    // Every alternative records every allocation that passes its own terms,
    // whether or not an earlier alternative already matched.
    if (!(passed & (uint64_t{1} << i))) continue;
    const uint64_t nth = alt.seen++;
    alt.run = (nth > 0 && size == alt.last_size) ? alt.run + 1 : 1;
    alt.last_size = size;
    bool ok = true;
    for (const Count& c : alt.counts) {
      const uint64_t v = c.is_run ? alt.run : nth;
      switch (c.op) {
        case Op::kGe:
          ok &= v >= c.value;
          break;
        case Op::kGt:
          ok &= v > c.value;
          break;
        case Op::kLe:
          ok &= v <= c.value;
          break;
        case Op::kLt:
          ok &= v < c.value;
          break;
      }
    }
    if (ok && !d.tier) d = Decision{true, static_cast<int>(i), alt.run, nth};
  }
  return d;
}

}  // namespace kvtier
