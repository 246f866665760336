// CallSite (see call_site.h).
#include "runtime/call_site.h"

#include <dlfcn.h>
#include <execinfo.h>

namespace kvtier {
namespace {

// The object (executable or library) kvtier's own code is in.
const void* OwnObject() {
  static const void* base = [] {
    Dl_info info{};
    return dladdr(reinterpret_cast<const void*>(&OwnObject), &info) ? info.dli_fbase : nullptr;
  }();
  return base;
}

}  // namespace

const std::string& CallSite::lib() {
  if (!lib_known_) {
    lib_known_ = true;
    ++lookups_;
    Dl_info info{};
    if (return_address_ && dladdr(return_address_, &info) && info.dli_fname) lib_ = info.dli_fname;
  }
  return lib_;
}

bool CallSite::StackHas(std::string_view text) {
  if (!stack_known_) {
    stack_known_ = true;
    ++lookups_;
    // Room for kvtier's own frames (this one, the matcher, the runtime, the
    // hook) below the kFrames that count.
    void* frames[kFrames + 16];
    const int n = backtrace(frames, kFrames + 16);
    const void* own = OwnObject();
    int counted = 0;
    bool above_own = false;
    for (int i = 0; i < n && counted < kFrames; ++i) {
      Dl_info info{};
      // A return address points after the call: look up the byte before it.
      const bool found = dladdr(static_cast<char*>(frames[i]) - 1, &info) != 0;
      if (!above_own && found && info.dli_fbase == own) continue;
      above_own = true;
      ++counted;
      if (found && info.dli_sname) symbols_.emplace_back(info.dli_sname);
    }
  }
  for (const std::string& s : symbols_) {
    if (s.find(text) != std::string::npos) return true;
  }
  return false;
}

}  // namespace kvtier
