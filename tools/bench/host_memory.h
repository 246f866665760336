// What memory given back costs a restore on this machine, for `kvtier-bench
// spill`: every restore fills memory that spills freed (a punched memfd
// page, a discarded managed page, a heap block given back), and a virtual
// machine whose balloon reports free memory to its host gets that memory
// back from the host, many times slower, once it stayed free a while.
// Thread-safety: plain functions; MeasureRefill blocks the caller for
// `wait`.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace kvtier::bench {

// Whether a virtio balloon among `virtio_devices` (sysfs's
// /sys/bus/virtio/devices: one folder per device, with `device` and
// `features`) offers free page reporting (VIRTIO_BALLOON_F_REPORTING): the
// guest then hands pages that stay free to the host, and its next touch of
// each waits for the host to give it back.
bool BalloonReportsFreeMemory(const std::string& virtio_devices = "/sys/bus/virtio/devices");

// GB/s of one core copying `bytes` of src into anonymous memory freed
// (MADV_DONTNEED) right before, then into the same memory freed `wait`
// before; 0 where memory could not be had. Then the same fill in two
// steps: the kernel maps and zeroes the memory (MADV_POPULATE_WRITE,
// Linux 5.14; 0 where it fails), and one byte of each base page is read
// through the new mappings, twice: the first read is the first use of each
// translation, which costs a page walk on hardware and, in a virtual
// machine whose host shadows the guest's page tables, an exit to the host.
struct RefillCost {
  double fresh_gbs = 0;
  double later_gbs = 0;
  double populate_gbs = 0;
  double first_use_us = 0;   // a base page, the first read after the kernel mapped it
  double second_use_us = 0;  // the same read again
};
RefillCost MeasureRefill(const uint8_t* src, size_t bytes, std::chrono::milliseconds wait);

}  // namespace kvtier::bench
