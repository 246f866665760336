/* kvtier statistics segment: the layout other programs may depend on.
 *
 * Each kvtier process publishes one segment at /dev/shm/kvtier.<pid> (mode
 * 0600, removed at exit). kvtier-top and kvtier-exporter read it; they never
 * link the runtime. The segment begins with magic, version and size, so a
 * reader refuses a layout it does not know. One writer (the process's policy
 * thread) updates it under a sequence lock: `seq` is odd while a write is in
 * progress; a reader copies the segment and retries if `seq` was odd or
 * changed. The writer never waits for readers. C-compatible, fixed layout;
 * every field is 8-byte aligned and the size is a multiple of 8, so a copy
 * can move it as 64-bit words. */
#ifndef KVTIER_STATS_H_
#define KVTIER_STATS_H_

#include <stdint.h>

#define KVTIER_STATS_MAGIC 0x315453524954564bull /* "KVTIRST1" */
#define KVTIER_STATS_VERSION 6u
#define KVTIER_STATS_PREFIX "kvtier." /* /dev/shm/kvtier.<pid> */
#define KVTIER_STATS_MAX_REGIONS 64
#define KVTIER_STATS_HEAT_BUCKETS 32
#define KVTIER_STATS_MAX_EVENTS 32
#define KVTIER_STATS_MAX_GPUS 16

/* One tiered region. heat[i] is the mean heat (0..255) of the i-th slice of
 * its pages; tier[i] the tier most of that slice is on (0 device, 1 host,
 * 2 disk, 3 never touched). A page's heat maps to 0..255 as 32 * (1 +
 * log2(decayed access count)), 0 for never accessed, 255 from 128 on. A
 * region of fewer than 32 pages stretches each page over several slices. */
typedef struct kvtier_stats_region {
  uint64_t base;
  uint64_t size;
  uint32_t id;
  uint32_t page_size;
  uint32_t pages_device;
  uint32_t pages_host;
  uint32_t pages_disk;
  uint32_t pages_untouched;
  uint8_t heat[KVTIER_STATS_HEAT_BUCKETS];
  uint8_t tier[KVTIER_STATS_HEAT_BUCKETS];
  char tag[32]; /* e.g. "alloc#12 libchat.so" */
} kvtier_stats_region;

/* A recent event (errors, driver evictions, degraded disk). */
typedef struct kvtier_stats_event {
  uint64_t time_ns; /* CLOCK_REALTIME */
  char text[88];
} kvtier_stats_event;

/* One GPU the process tiers on: the CUDA backend's regions belong to the GPU
 * they were allocated on, each with its own budget; the simulated GPU and the
 * host backend have one, GPU 0. */
typedef struct kvtier_stats_gpu {
  int32_t ordinal;
  uint32_t reserved;
  uint64_t used_bytes;   /* tiered pages resident on it */
  uint64_t budget_bytes; /* what its tiered pages may occupy */
} kvtier_stats_gpu;

typedef struct kvtier_stats_segment {
  uint64_t magic;
  uint32_t version;
  uint32_t size; /* sizeof(kvtier_stats_segment) of the writer */
  uint64_t seq;  /* sequence lock, see above */
  int32_t pid;
  uint32_t page_size;
  uint64_t start_time_ns;  /* CLOCK_REALTIME at start */
  uint64_t update_time_ns; /* CLOCK_REALTIME of the last publish */
  uint64_t start_ticks;    /* field 22 (starttime) of /proc/<pid>/stat, 0 if
                            * unknown: a reader compares it with the live
                            * process's to tell a reused pid */
  char command[64];        /* program name */
  char backend[16];        /* "sim", "cuda", "off" */
  char policy[16];
  char disk_io[16]; /* "io_uring+direct", "pread", "off" */
#define KVTIER_STAT(name, kind, doc) uint64_t name;
#include "kvtier/stats_fields.def"
#undef KVTIER_STAT
  uint32_t region_row_count; /* valid entries in region_rows[] */
  uint32_t regions_omitted;  /* regions alive but not listed (over the cap) */
  uint64_t event_count;      /* events ever written; events[i % MAX] */
  kvtier_stats_region region_rows[KVTIER_STATS_MAX_REGIONS];
  kvtier_stats_event events[KVTIER_STATS_MAX_EVENTS];
  uint32_t gpu_count; /* valid entries in gpus[], ascending ordinal (version 2) */
  uint32_t gpus_omitted;
  kvtier_stats_gpu gpus[KVTIER_STATS_MAX_GPUS];
} kvtier_stats_segment;

#endif /* KVTIER_STATS_H_ */
