// Tests of spilled KV at rest: PageCipher's seals (a changed slot,
// generation, place or bit fails the tag), the key kept out of what a core
// dump holds, and the spill store end to end: no trace of a page's bytes in
// the file's blocks, and a flipped bit, a page copied over another, an old
// copy written back or a page read for another place each caught.
#include "runtime/storage/page_cipher.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/storage/page_io.h"
#include "runtime/storage/spill_batch.h"
#include "runtime/storage/spill_store.h"
#include "storage_test_util.h"

namespace kvtier {
namespace {

using storage_test::kTestPage;
using storage_test::Pattern;
using storage_test::SmallConfig;
using storage_test::TempDir;

std::unique_ptr<PageCipher> MakeCipher(CipherLib lib) {
  Result<std::unique_ptr<PageCipher>> c = PageCipher::Create(lib);
  EXPECT_TRUE(c.ok()) << c.status().message();
  if (!c.ok()) return nullptr;
  EXPECT_EQ(c.value()->lib(), lib);
  return std::move(c).value();
}

// The implementations this build and CPU run: each test below runs on each.
std::vector<CipherLib> RunnableLibs() {
  std::vector<CipherLib> libs{CipherLib::kOpenSsl};
  if (PageCipher::IpsecMbRuns()) libs.push_back(CipherLib::kIpsecMb);
  return libs;
}

std::string LibName(const ::testing::TestParamInfo<CipherLib>& info) {
  return info.param == CipherLib::kIpsecMb ? "IpsecMb" : "OpenSsl";
}

class PageCipherTest : public ::testing::TestWithParam<CipherLib> {
 protected:
  std::unique_ptr<PageCipher> MakeCipher() { return kvtier::MakeCipher(GetParam()); }
};
INSTANTIATE_TEST_SUITE_P(Libs, PageCipherTest, ::testing::ValuesIn(RunnableLibs()), LibName);

bool Holds(const std::vector<uint8_t>& hay, const uint8_t* needle, size_t len) {
  return std::search(hay.begin(), hay.end(), needle, needle + len) != hay.end();
}

TEST_P(PageCipherTest, ASealedPageHoldsNoneOfItsBytesAndOpensBackExactly) {
  auto cipher = MakeCipher();
  ASSERT_TRUE(cipher);
  const std::vector<uint8_t> page = Pattern(kTestPage, 7);
  std::vector<uint8_t> sealed(kTestPage);
  uint8_t tag[kSealTagBytes];
  const SealId id{3, 1, {5, 9}};
  ASSERT_TRUE(cipher->Seal(id, page.data(), sealed.data(), kTestPage, tag).ok());
  for (size_t off = 0; off + 32 <= kTestPage; off += 4096) {
    EXPECT_FALSE(Holds(sealed, page.data() + off, 32)) << "plain bytes at offset " << off;
  }
  // The next generation of the same slot and page seals differently.
  std::vector<uint8_t> again(kTestPage);
  uint8_t tag2[kSealTagBytes];
  ASSERT_TRUE(cipher->Seal({3, 2, {5, 9}}, page.data(), again.data(), kTestPage, tag2).ok());
  EXPECT_NE(memcmp(sealed.data(), again.data(), 64), 0) << "a nonce was reused";

  ASSERT_TRUE(cipher->Open(id, sealed.data(), kTestPage, tag).ok());
  EXPECT_EQ(sealed, page);
  // In place works as well (the store seals into the bounce buffer, but a
  // caller may not).
  std::vector<uint8_t> in_place = page;
  ASSERT_TRUE(cipher->Seal(id, in_place.data(), in_place.data(), kTestPage, tag).ok());
  ASSERT_TRUE(cipher->Open(id, in_place.data(), kTestPage, tag).ok());
  EXPECT_EQ(in_place, page);
}

TEST_P(PageCipherTest, AWipedKeyIsZeroesAndNoPageSealsOrOpensAfter) {
  auto cipher = MakeCipher();
  ASSERT_TRUE(cipher);
  const std::vector<uint8_t> page = Pattern(kTestPage, 8);
  std::vector<uint8_t> sealed(kTestPage);
  uint8_t tag[kSealTagBytes];
  const SealId id{1, 1, {2, 3}};
  ASSERT_TRUE(cipher->Seal(id, page.data(), sealed.data(), kTestPage, tag).ok());
  const uint8_t zeros[kCipherKeyBytes] = {};
  uint8_t key[kCipherKeyBytes];
  cipher->CopyKeyForTest(key);
  ASSERT_NE(memcmp(key, zeros, sizeof key), 0) << "the control: a key before the wipe";
  EXPECT_FALSE(cipher->wiped());

  cipher->Wipe();
  EXPECT_TRUE(cipher->wiped());
  cipher->CopyKeyForTest(key);
  EXPECT_EQ(memcmp(key, zeros, sizeof key), 0) << "the key is still in memory";
  std::vector<uint8_t> opened = sealed;
  const Status open = cipher->Open(id, opened.data(), kTestPage, tag);
  EXPECT_FALSE(open.ok());
  EXPECT_NE(open.message().find("wiped"), std::string::npos) << open.message();
  EXPECT_FALSE(cipher->Seal(id, page.data(), sealed.data(), kTestPage, tag).ok());
  cipher->Wipe();  // twice is fine
}

TEST_P(PageCipherTest, PagesOfAnyLengthOpenBackExactly) {
  // Seal goes through a small chunk: lengths around and across its size,
  // a short page, and a 2 MiB page.
  auto cipher = MakeCipher();
  ASSERT_TRUE(cipher);
  for (size_t len : {size_t{1}, size_t{4095}, size_t{16383}, size_t{16384}, size_t{16385},
                     size_t{40000}, size_t{65536}, (size_t{2} << 20) + 7}) {
    const std::vector<uint8_t> page = Pattern(len, 11);
    std::vector<uint8_t> sealed(len);
    uint8_t tag[kSealTagBytes];
    const SealId id{4, 1, {2, 3}};
    ASSERT_TRUE(cipher->Seal(id, page.data(), sealed.data(), len, tag).ok()) << len;
    if (len >= 64) {
      EXPECT_NE(memcmp(sealed.data() + len - 64, page.data() + len - 64, 64), 0) << len;
    }
    ASSERT_TRUE(cipher->Open(id, sealed.data(), len, tag).ok()) << len;
    EXPECT_EQ(sealed, page) << len;
  }
}

TEST_P(PageCipherTest, AnotherSlotGenerationPlaceTagOrAFlippedBitFailsTheTag) {
  auto cipher = MakeCipher();
  ASSERT_TRUE(cipher);
  const std::vector<uint8_t> page = Pattern(8192, 11);
  std::vector<uint8_t> sealed(page.size());
  uint8_t tag[kSealTagBytes];
  const SealId id{4, 7, {2, 30}};
  ASSERT_TRUE(cipher->Seal(id, page.data(), sealed.data(), page.size(), tag).ok());
  struct Case {
    const char* what;
    SealId id;
    size_t flip_byte;  // SIZE_MAX: none; else a byte of the page (or of the tag)
    bool in_tag;
  };
  const Case cases[] = {
      {"the right page", id, SIZE_MAX, false},
      {"another slot (a page copied over another)", {5, 7, {2, 30}}, SIZE_MAX, false},
      {"an older generation (an old copy written back)", {4, 6, {2, 30}}, SIZE_MAX, false},
      {"another page of the region", {4, 7, {2, 31}}, SIZE_MAX, false},
      {"another region", {4, 7, {3, 30}}, SIZE_MAX, false},
      {"a flipped bit in the page", id, 4000, false},
      {"a flipped bit in the tag", id, 3, true},
  };
  for (const Case& c : cases) {
    std::vector<uint8_t> bytes = sealed;
    uint8_t t[kSealTagBytes];
    memcpy(t, tag, sizeof t);
    if (c.flip_byte != SIZE_MAX) (c.in_tag ? t[c.flip_byte] : bytes[c.flip_byte]) ^= 0x04;
    Status s = cipher->Open(c.id, bytes.data(), bytes.size(), t);
    const bool right = std::string(c.what) == "the right page";
    EXPECT_EQ(s.ok(), right) << c.what << ": " << s.message();
    if (right) {
      EXPECT_EQ(bytes, page);
    } else {
      EXPECT_NE(s.message().find("tag does not match"), std::string::npos) << s.message();
    }
  }
  // A cipher of another process (another key) opens nothing of this one's.
  auto other = MakeCipher();
  ASSERT_TRUE(other);
  std::vector<uint8_t> bytes = sealed;
  EXPECT_FALSE(other->Open(id, bytes.data(), bytes.size(), tag).ok());
}

TEST(PageCipherLibsTest, BothImplementationsSealTheSameBytesAndOpenEachOthersPages) {
  if (!PageCipher::IpsecMbRuns()) {
    GTEST_SKIP() << "one implementation here: this build or CPU has no intel-ipsec-mb";
  }
  uint8_t key[kCipherKeyBytes];
  for (size_t i = 0; i < sizeof key; ++i) key[i] = static_cast<uint8_t>(i * 37 + 1);
  auto openssl = PageCipher::CreateWithKeyForTest(CipherLib::kOpenSsl, key);
  auto ipsec_mb = PageCipher::CreateWithKeyForTest(CipherLib::kIpsecMb, key);
  ASSERT_TRUE(openssl.ok() && ipsec_mb.ok());
  ASSERT_EQ(openssl.value()->lib(), CipherLib::kOpenSsl);
  ASSERT_EQ(ipsec_mb.value()->lib(), CipherLib::kIpsecMb);
  for (size_t len :
       {size_t{1}, size_t{15}, size_t{4095}, size_t{16385}, size_t{65536}, (size_t{2} << 20) + 7}) {
    const std::vector<uint8_t> page = Pattern(len, 5);
    const SealId id{9, 3, {1, 77}};
    std::vector<uint8_t> by_openssl(len), by_ipsec_mb(len);
    uint8_t tag_openssl[kSealTagBytes], tag_ipsec_mb[kSealTagBytes];
    ASSERT_TRUE(openssl.value()->Seal(id, page.data(), by_openssl.data(), len, tag_openssl).ok());
    ASSERT_TRUE(
        ipsec_mb.value()->Seal(id, page.data(), by_ipsec_mb.data(), len, tag_ipsec_mb).ok());
    EXPECT_EQ(by_openssl, by_ipsec_mb) << len;
    EXPECT_EQ(memcmp(tag_openssl, tag_ipsec_mb, kSealTagBytes), 0) << len;
    ASSERT_TRUE(ipsec_mb.value()->Open(id, by_openssl.data(), len, tag_openssl).ok()) << len;
    EXPECT_EQ(by_openssl, page) << len;
    ASSERT_TRUE(openssl.value()->Open(id, by_ipsec_mb.data(), len, tag_ipsec_mb).ok()) << len;
    EXPECT_EQ(by_ipsec_mb, page) << len;
  }
}

TEST(PageCipherLibsTest, AutoTakesIpsecMbWhereItRunsSaysWhichAndEveryOptionWordParses) {
  auto cipher = MakeCipher(PageCipher::IpsecMbRuns() ? CipherLib::kIpsecMb : CipherLib::kOpenSsl);
  Result<std::unique_ptr<PageCipher>> by_auto = PageCipher::Create(CipherLib::kAuto);
  ASSERT_TRUE(by_auto.ok()) << by_auto.status().message();
  ASSERT_TRUE(cipher);
  EXPECT_EQ(by_auto.value()->lib(), cipher->lib());
  const bool ipsec_mb = cipher->lib() == CipherLib::kIpsecMb;
  EXPECT_NE(cipher->lib_name().find(ipsec_mb ? "intel-ipsec-mb" : "OpenSSL"), std::string::npos)
      << cipher->lib_name();
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string text((std::istreambuf_iterator<char>(cpuinfo)), std::istreambuf_iterator<char>());
  auto has = [&](const char* flag) { return text.find(flag) != std::string::npos; };
  // Sealing at copy speed (inline in the I/O thread) needs VAES and AVX-512.
  if (!ipsec_mb || !has(" vaes ")) {
    EXPECT_FALSE(cipher->seals_at_copy_speed());
  }
  bool vector_aes = ipsec_mb;
  for (const char* flag : {" avx512f ", " avx512cd ", " avx512bw ", " avx512dq ", " avx512vl ",
                           " vaes ", " vpclmulqdq "}) {
    vector_aes = vector_aes && has(flag);
  }
  if (vector_aes) {
    EXPECT_TRUE(cipher->seals_at_copy_speed()) << cipher->lib_name();
  }
  Result<std::unique_ptr<PageCipher>> openssl = PageCipher::Create(CipherLib::kOpenSsl);
  ASSERT_TRUE(openssl.ok());
  EXPECT_FALSE(openssl.value()->seals_at_copy_speed());
#ifdef KVTIER_HAVE_IPSEC_MB
  // Built in: it runs wherever the CPU has AES-NI.
  EXPECT_EQ(PageCipher::IpsecMbRuns(), has(" aes "));
#else
  Result<std::unique_ptr<PageCipher>> refused = PageCipher::Create(CipherLib::kIpsecMb);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("KVTIER_DISK_CIPHER=openssl"), std::string::npos);
#endif
  CipherLib lib = CipherLib::kAuto;
  EXPECT_TRUE(ParseCipherLib("openssl", &lib));
  EXPECT_EQ(lib, CipherLib::kOpenSsl);
  EXPECT_TRUE(ParseCipherLib("ipsec-mb", &lib));
  EXPECT_EQ(lib, CipherLib::kIpsecMb);
  EXPECT_TRUE(ParseCipherLib("auto", &lib));
  EXPECT_EQ(lib, CipherLib::kAuto);
  EXPECT_FALSE(ParseCipherLib("aes", &lib));
}

// Every readable mapping a core dump would hold: not MADV_DONTDUMP ("dd"),
// with resident pages.
struct Mapping {
  uintptr_t start, end;
};
std::vector<Mapping> DumpedMappings() {
  std::ifstream smaps("/proc/self/smaps");
  std::vector<Mapping> out;
  std::string line;
  Mapping m{};
  bool readable = false;
  uint64_t rss_kb = 0;
  while (std::getline(smaps, line)) {
    unsigned long a, b;
    char perms[8];
    if (sscanf(line.c_str(), "%lx-%lx %7s", &a, &b, perms) == 3 && line.find(':') > 17) {
      m = {a, b};
      readable = perms[0] == 'r';
      rss_kb = 0;
    } else if (line.rfind("Rss:", 0) == 0) {
      rss_kb = std::stoull(line.substr(4));
    } else if (line.rfind("VmFlags:", 0) == 0) {
      const bool dontdump = line.find(" dd") != std::string::npos;
      if (readable && !dontdump && rss_kb > 0) out.push_back(m);
    }
  }
  return out;
}

// Whether `needle` sits anywhere in what a core dump of this process would
// hold, read through /proc/self/mem (which skips what cannot be read).
bool InDumpedMemory(const uint8_t* needle, size_t len) {
  const int fd = open("/proc/self/mem", O_RDONLY);
  if (fd < 0) return false;
  std::vector<uint8_t> buf(1 << 20);
  bool found = false;
  for (const Mapping& m : DumpedMappings()) {
    for (uintptr_t at = m.start; at < m.end && !found; at += buf.size() - len) {
      const size_t n = std::min<size_t>(buf.size(), m.end - at);
      const ssize_t got = pread(fd, buf.data(), n, static_cast<off_t>(at));
      if (got <= static_cast<ssize_t>(len)) break;
      found =
          std::search(buf.begin(), buf.begin() + got, needle, needle + len) != buf.begin() + got;
      if (n < buf.size()) break;
    }
  }
  close(fd);
  return found;
}

TEST_P(PageCipherTest, TheKeyIsInNoMemoryACoreDumpHolds) {
  auto cipher = MakeCipher();
  ASSERT_TRUE(cipher);
  {
    // Seal and open a page first: OpenSSL's contexts must leave no copy.
    const std::vector<uint8_t> page = Pattern(kTestPage, 3);
    std::vector<uint8_t> sealed(kTestPage);
    uint8_t tag[kSealTagBytes];
    ASSERT_TRUE(cipher->Seal({0, 1, {}}, page.data(), sealed.data(), kTestPage, tag).ok());
    ASSERT_TRUE(cipher->Open({0, 1, {}}, sealed.data(), kTestPage, tag).ok());
  }
  // The test's own copy of the key lives where no dump looks either.
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* mem = mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  ASSERT_EQ(madvise(mem, page, MADV_DONTDUMP), 0);
  auto* key = static_cast<uint8_t*>(mem);
  cipher->CopyKeyForTest(key);
  EXPECT_FALSE(InDumpedMemory(key, 32)) << "the key is in memory a core dump would hold";
  // The search can find things: a canary on the heap is found.
  std::vector<uint8_t> canary(key, key + 32);
  canary[0] ^= 0xff;
  std::vector<uint8_t> probe = canary;
  probe[0] ^= 0xff;  // the key again, now on the heap
  EXPECT_TRUE(InDumpedMemory(probe.data(), 32)) << "the scan does not see the heap";
  memset(probe.data(), 0, probe.size());
  munmap(mem, page);
}

// The spill store end to end, with encryption on (the default).
class SealedStoreTest : public ::testing::Test {
 protected:
  void Open(uint32_t slots, bool encrypt = true) {
    ASSERT_TRUE(tmp_.ok());
    SpillStoreConfig cfg = SmallConfig(tmp_.path(), slots);
    cfg.encrypt = encrypt;
    Result<std::unique_ptr<SpillStore>> s = SpillStore::Create(cfg, nullptr, &counters_);
    ASSERT_TRUE(s.ok()) << s.status().message();
    store_ = std::move(s).value();
  }
  SpillSlot Write(uint64_t seed, PagePlace place) {
    const std::vector<uint8_t> p = Pattern(kTestPage, seed);
    Result<SpillSlot> s = store_->Write(p.data(), p.size(), place);
    EXPECT_TRUE(s.ok()) << s.status().message();
    return s.ok() ? s.value() : SpillSlot{};
  }
  // Reads `slot` back for `place`: its status and failure.
  Status Read(const SpillSlot& slot, PagePlace place, ReadFailure* why,
              std::vector<uint8_t>* back) {
    back->assign(kTestPage, 0xee);
    return store_->Read(slot.index, back->data(), kTestPage, slot.checksum, why, place);
  }

  TempDir tmp_;
  Counters counters_;
  std::unique_ptr<SpillStore> store_;
};

TEST_F(SealedStoreTest, TheFileHoldsNoTraceOfTheSpilledPagesInTheClear) {
  for (bool encrypt : {true, false}) {
    SCOPED_TRACE(encrypt ? "encrypted" : "in the clear (the test's control)");
    Open(16, encrypt);
    EXPECT_EQ(store_->encrypts(), encrypt);
    std::vector<SpillSlot> slots;
    for (uint32_t i = 0; i < 8; ++i) slots.push_back(Write(100 + i, {1, i}));
    for (uint32_t i = 0; i < 8; ++i) {
      const std::vector<uint8_t> p = Pattern(kTestPage, 100 + i);
      for (size_t off : {size_t{0}, kTestPage / 2, kTestPage - 64}) {
        EXPECT_EQ(storage_test::SpillFileHolds(*store_, p.data() + off, 64), !encrypt)
            << "page " << i << " offset " << off;
      }
      std::vector<uint8_t> back;
      ReadFailure why;
      ASSERT_TRUE(Read(slots[i], {1, i}, &why, &back).ok());
      EXPECT_EQ(back, p);
    }
    store_.reset();
  }
}

TEST_F(SealedStoreTest, APageNeededAfterTheKeyIsWipedAtExitEndsTheProcessWithItsStatus) {
  Open(4);
  const SpillSlot a = Write(1, {7, 0});
  std::vector<uint8_t> back;
  ReadFailure why;
  ASSERT_TRUE(Read(a, {7, 0}, &why, &back).ok()) << "the control: it reads before the wipe";
  int status = -1;
  EXPECT_FALSE(store_->exiting(&status));
  ASSERT_TRUE(store_->writable());

  store_->WipeKeyAtExit(3);
  ASSERT_TRUE(store_->exiting(&status));
  EXPECT_EQ(status, 3);
  EXPECT_TRUE(store_->cipher()->wiped());
  EXPECT_FALSE(store_->writable()) << "writes go on after the wipe";
  const Status read = Read(a, {7, 0}, &why, &back);
  ASSERT_FALSE(read.ok());
  // The restore paths stop on such a page: at exit that is the exit's own
  // status, not an abort.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(StopOnLostPage(*store_, 7, "kv", 0, read), ::testing::ExitedWithCode(3), "");
}

TEST_F(SealedStoreTest, AFlippedBitAPageCopiedOverAnotherAndAnOldCopyAreCaught) {
  Open(2);
  const SpillSlot a = Write(1, {7, 0});
  const SpillSlot b = Write(2, {7, 1});
  ReadFailure why;
  std::vector<uint8_t> back;
  const uint64_t off_a = uint64_t{a.index} * kTestPage, off_b = uint64_t{b.index} * kTestPage;

  // A flipped bit: read, retried, then reported as corruption; zeros left.
  std::vector<uint8_t> byte = storage_test::PeekSpillFile(*store_, off_a + 999, 1);
  ASSERT_EQ(byte.size(), 1u);
  byte[0] ^= 1;
  ASSERT_TRUE(storage_test::PokeSpillFile(*store_, off_a + 999, byte.data(), 1));
  Status s = Read(a, {7, 0}, &why, &back);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(why, ReadFailure::kCorruption);
  EXPECT_NE(s.message().find("tag does not match"), std::string::npos) << s.message();
  EXPECT_TRUE(IsAllZero(back.data(), back.size()));
  EXPECT_EQ(Counters::Get(counters_.checksum_mismatches), 2u) << "the read and its retry";
  byte[0] ^= 1;
  ASSERT_TRUE(storage_test::PokeSpillFile(*store_, off_a + 999, byte.data(), 1));
  ASSERT_TRUE(Read(a, {7, 0}, &why, &back).ok()) << "the page is back as it was";
  EXPECT_EQ(back, Pattern(kTestPage, 1));

  // Page a's blocks copied over page b's: b fails.
  const std::vector<uint8_t> blocks_a = storage_test::PeekSpillFile(*store_, off_a, kTestPage);
  const std::vector<uint8_t> blocks_b = storage_test::PeekSpillFile(*store_, off_b, kTestPage);
  ASSERT_TRUE(storage_test::PokeSpillFile(*store_, off_b, blocks_a.data(), kTestPage));
  EXPECT_FALSE(Read(b, {7, 1}, &why, &back).ok());
  EXPECT_EQ(why, ReadFailure::kCorruption);
  ASSERT_TRUE(storage_test::PokeSpillFile(*store_, off_b, blocks_b.data(), kTestPage));
  ASSERT_TRUE(Read(b, {7, 1}, &why, &back).ok());

  // Slot b read back for another page (a bookkeeping mix-up) fails.
  EXPECT_FALSE(Read(b, {7, 0}, &why, &back).ok());
  EXPECT_FALSE(Read(b, {8, 1}, &why, &back).ok());

  // An old copy written back: slot b is freed and written again (the store
  // is full but for it), then its old blocks are put back.
  store_->Free(b.index);
  const SpillSlot b2 = Write(3, {7, 1});
  ASSERT_EQ(b2.index, b.index) << "the only free slot";
  ASSERT_TRUE(Read(b2, {7, 1}, &why, &back).ok());
  EXPECT_EQ(back, Pattern(kTestPage, 3));
  ASSERT_TRUE(storage_test::PokeSpillFile(*store_, off_b, blocks_b.data(), kTestPage));
  EXPECT_FALSE(Read(b2, {7, 1}, &why, &back).ok()) << "an old copy of the right place passed";
  EXPECT_EQ(why, ReadFailure::kCorruption);
}

TEST_F(SealedStoreTest, ARunIsOpenedPageByPageAtItsPlaces) {
  Open(8);
  std::vector<uint64_t> sums;
  for (uint32_t i = 0; i < 3; ++i) sums.push_back(Write(20 + i, {4, 10 + i}).checksum);
  Result<std::unique_ptr<SpillBatch>> batch = store_->NewBatch();
  ASSERT_TRUE(batch.ok());
  Result<AlignedBuffer> buf = AlignedBuffer::Allocate(3 * kTestPage);
  ASSERT_TRUE(buf.ok());
  uint8_t* dst = buf.value().data();
  std::vector<SpillCompletion> done;
  batch.value()->AddReadRun(0, 3, dst, sums.data(), 1, {4, 10});
  ASSERT_TRUE(batch.value()->WaitAll(&done).ok());
  ASSERT_EQ(done.size(), 1u);
  EXPECT_TRUE(done[0].status.ok()) << done[0].status.message();
  for (uint32_t i = 0; i < 3; ++i) {
    EXPECT_EQ(memcmp(dst + i * kTestPage, Pattern(kTestPage, 20 + i).data(), kTestPage), 0) << i;
  }
  // The same slots as another region's pages: the first page fails.
  done.clear();
  batch.value()->AddReadRun(0, 3, dst, sums.data(), 2, {4, 11});
  ASSERT_TRUE(batch.value()->WaitAll(&done).ok());
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].failure, ReadFailure::kCorruption) << done[0].status.message();
}

}  // namespace
}  // namespace kvtier
