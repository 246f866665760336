// A process SIGKILLed while the simulated GPU spills and restores pages
// leaves nothing in the spill directory, with O_TMPFILE and with the
// open+unlink fallback.
#include <unistd.h>

#include "runtime/device/memfd/memfd_device.h"
#include "tests/sim/sim_disk_test_util.h"
#include "tests/storage/kill_spiller.h"

namespace kvtier::testing {
namespace {

constexpr size_t kPage = SimDiskTest::kPage;

// Child: spills and restores pages of a sim region forever (a slow device
// keeps a write in flight much of the time); writes one byte to `ready`
// after the first spill. Never returns.
[[noreturn]] void SpillThroughTheDeviceForever(const std::string& dir, bool refuse_tmpfile,
                                               int ready) {
  FaultEnv env(Env::Default());
  env.RefuseTmpfile(refuse_tmpfile);
  Result<std::unique_ptr<SpillStore>> store =
      SpillStore::Create(storage_test::SmallConfig(dir, 16, kPage), &env, nullptr);
  if (!store.ok()) _exit(2);
  MemfdDeviceConfig config;
  config.capacity_bytes = 4 * kPage;
  config.store = store.value().get();
  Result<std::unique_ptr<MemfdDevice>> dev = MemfdDevice::Create(config);
  if (!dev.ok()) _exit(3);
  Result<RegionPtr> made = dev.value()->CreateRegion(1, 8 * kPage, kPage, "crash");
  if (!made.ok()) _exit(4);
  Region& r = *made.value();
  env.SetSlowDelay(2'000'000);
  env.SetRate(Fault::kSlow, 0.5);
  bool told = false;
  for (uint64_t i = 0;; ++i) {
    const uint32_t p = static_cast<uint32_t>(i % 8);
    WritePattern(PageBase(r, p), kPage, i);
    if (!dev.value()->Demote(r, p).ok() || !dev.value()->Spill(r, p).ok()) _exit(5);
    if (CheckPattern(PageBase(r, p), kPage, i) != -1) _exit(6);  // restores it
    if (!told) {
      told = write(ready, "x", 1) == 1;
      if (!told) _exit(7);
    }
  }
}

TEST_F(SimDiskTest, KilledWhileSpillingThroughTheDeviceLeavesNoSpillFile) {
  storage_test::ExpectKilledSpillerLeavesNoFile(SpillThroughTheDeviceForever);
}

}  // namespace
}  // namespace kvtier::testing
