// A process SIGKILLed while spilling leaves nothing in the spill directory,
// with O_TMPFILE and with the open+unlink fallback.
#include <gtest/gtest.h>
#include <unistd.h>

#include "runtime/storage/fault_env.h"
#include "runtime/storage/spill_store.h"
#include "storage_test_util.h"
#include "tests/storage/kill_spiller.h"

namespace kvtier {
namespace {

using storage_test::kTestPage;
using storage_test::Pattern;
using storage_test::SmallConfig;

// Child: spills and frees pages forever; writes one byte to `ready` after
// the first spill. Never returns.
[[noreturn]] void SpillForever(const std::string& dir, bool refuse_tmpfile, int ready) {
  FaultEnv env(Env::Default());
  env.RefuseTmpfile(refuse_tmpfile);
  Result<std::unique_ptr<SpillStore>> s = SpillStore::Create(SmallConfig(dir, 64), &env, nullptr);
  if (!s.ok()) _exit(2);
  std::vector<uint8_t> page = Pattern(kTestPage, 1);
  bool told = false;
  for (uint64_t i = 0;; ++i) {
    Result<SpillSlot> r = s.value()->Write(page.data(), page.size());
    if (!r.ok()) _exit(3);
    if (i % 2) s.value()->Free(r.value().index);
    if (!told) {
      told = write(ready, "x", 1) == 1;
      if (!told) _exit(4);
    }
  }
}

TEST(SpillCrashTest, KilledSpillerLeavesNoFile) {
  storage_test::ExpectKilledSpillerLeavesNoFile(SpillForever);
}

}  // namespace
}  // namespace kvtier
