// MatchRule: which device allocations become tiered regions (KVTIER_MATCH).
//
// Grammar: terms separated by ',' that must all hold; terms:
//   size>=SIZE  size>SIZE  size<=SIZE  size<SIZE   allocation size
//   index>=N  index<N                              0-based allocation order
//   lib~TEXT                                       calling library path contains TEXT
//   sym~TEXT                                       a function on the call stack
//                                                  (its first CallSite::kFrames
//                                                  frames) has a name containing TEXT
//   all  none
// Size and index terms are checked first; lib~ and sym~ look up the caller
// (CallSite) only for an allocation that passed them.
// Example: "size>=64M,index>=8". Thread-safety: immutable after Parse.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/call_site.h"
#include "runtime/status.h"

namespace kvtier {

// `s` without the blanks (spaces, tabs) around it: the rule grammars (this
// one and allocation_matcher.h's) allow them around terms and values.
inline std::string_view TrimBlanks(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

class MatchRule {
 public:
  static Result<MatchRule> Parse(std::string_view text);
  bool Matches(uint64_t size, uint64_t index, CallSite& caller) const;
  bool needs_caller() const { return needs_caller_; }
  // The smallest size an allocation may have and match (its size>= and
  // size> terms; UINT64_MAX for `none`): smaller ones can be turned away
  // before anything else is looked at.
  uint64_t MinSize() const;

 private:
  enum class Field { kSize, kIndex, kLib, kSym, kAll, kNone };
  enum class Op { kGe, kGt, kLe, kLt, kContains };
  struct Term {
    Field field;
    Op op;
    uint64_t value;
    std::string text;
  };
  std::vector<Term> terms_;
  bool needs_caller_ = false;
};

}  // namespace kvtier
