// CallSite: who made an allocation, as KVTIER_MATCH's lib~ and sym~ terms
// see it. Looked up only when a rule asks, and only once per allocation:
// dladdr scans an object's symbols and a stack walk does that per frame,
// so a rule's size terms run first (match.h) and small
// allocations never pay for them.
// Thread-safety: one thread uses an instance (the allocating one).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kvtier {

class CallSite {
 public:
  // How many frames above kvtier's own sym~ looks at.
  static constexpr int kFrames = 16;

  // The call that returns to `return_address` (a hook's caller), on this
  // thread's stack.
  explicit CallSite(const void* return_address) : return_address_(return_address) {}
  // Known values, innermost frame first (tests, the fuzz target).
  CallSite(std::string lib, std::vector<std::string> symbols)
      : lib_known_(true), stack_known_(true), lib_(std::move(lib)), symbols_(std::move(symbols)) {}

  // The calling library's path (dladdr of the return address); "" when unknown.
  const std::string& lib();
  // True when one of the first kFrames frames above kvtier's own is in a
  // function whose dynamic symbol name contains `text`. C++ names are
  // mangled, and a mangled name holds its class and function names whole
  // ("llama_kv_cache" is in "_ZN14llama_kv_cacheC2E...", where C marks a
  // constructor). A frame in a function its object does not export (a
  // static function, a program linked without -rdynamic) has no name and
  // matches nothing. Costs a backtrace and a dladdr per frame, and dladdr
  // scans the symbols of the frame's object: put a cheaper term first.
  bool StackHas(std::string_view text);
  // Lookups made so far (dladdr of the caller, the stack walk): 0 until a
  // term needs one, and always 0 for known values.
  int lookups() const { return lookups_; }

 private:
  const void* return_address_ = nullptr;
  bool lib_known_ = false;
  bool stack_known_ = false;
  std::string lib_;
  std::vector<std::string> symbols_;
  int lookups_ = 0;
};

}  // namespace kvtier
