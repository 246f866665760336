// PageCipher: AES-256-GCM for pages on their way to and from the spill file,
// so a stolen disk, the raw device or the blocks a crash leaves behind hold
// no KV in the clear, and a page changed, moved or replayed on disk fails
// its tag on the way back.
//
// Two implementations of the same cipher (KVTIER_DISK_CIPHER): Intel's
// intel-ipsec-mb where the build found it and the CPU has AES-NI (with VAES
// and AVX-512 it seals about 3x as fast a core as OpenSSL 3.0 does), else
// OpenSSL's EVP interface. Their pages and tags are the same bytes (a test
// opens each one's pages with the other).
//
// One random key per cipher (one spill store, so one per process), from
// getrandom, in a page of its own that is locked (never swapped), left out
// of core dumps (MADV_DONTDUMP) and wiped when the cipher is destroyed. It
// is never logged, exported or written. intel-ipsec-mb's expanded key (the
// round keys and the hash key's powers) lives in the same page. OpenSSL
// expands the key into a context on its heap for each page only: the
// context is freed, and OpenSSL wipes it, before Seal or Open returns.
//
// Each page is sealed under a nonce that is never reused under the key (the
// slot and that slot's write generation), with the page's place (region,
// page) and the generation bound in as additional data. The 16-byte tag is
// kept in memory beside the slot, not on the disk.
//
// Thread-safety: Seal and Open may run on any number of threads at once (the
// key is read-only after Create). Open is safe in a fork child: it allocates
// only through malloc, which glibc makes usable there, and takes no lock of
// the parent's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "runtime/mutex.h"
#include "runtime/status.h"

typedef struct evp_cipher_st EVP_CIPHER;
struct IMB_MGR;

namespace kvtier {

// Which page of which region a spill slot holds: bound into the page's seal,
// so a slot read back for another page fails its tag.
struct PagePlace {
  uint32_t region = 0;
  uint32_t page = 0;
  PagePlace Next(uint32_t n) const { return {region, page + n}; }
};

// What a page was sealed under: its slot and that slot's write generation
// (together the nonce), and its place.
struct SealId {
  uint32_t slot = 0;
  uint64_t generation = 0;
  PagePlace place;
};

constexpr size_t kSealTagBytes = 16;
constexpr size_t kCipherKeyBytes = 32;

// Which implementation of AES-256-GCM seals the pages (KVTIER_DISK_CIPHER).
enum class CipherLib {
  kAuto,     // intel-ipsec-mb where it can run here, else OpenSSL
  kIpsecMb,  // intel-ipsec-mb; Create fails where it cannot run
  kOpenSsl,  // OpenSSL's EVP interface
};
// "auto", "ipsec-mb", "openssl": the option's words. False for another word.
bool ParseCipherLib(const std::string& word, CipherLib* out);

class PageCipher {
 public:
  static Result<std::unique_ptr<PageCipher>> Create(CipherLib lib = CipherLib::kAuto);
  // A cipher under a given key, for tests that seal with one implementation
  // and open with the other.
  static Result<std::unique_ptr<PageCipher>> CreateWithKeyForTest(
      CipherLib lib, const uint8_t key[kCipherKeyBytes]);
  // Whether intel-ipsec-mb was built in and this CPU runs it (has AES-NI).
  static bool IpsecMbRuns();
  ~PageCipher();
  PageCipher(const PageCipher&) = delete;
  PageCipher& operator=(const PageCipher&) = delete;

  // Encrypts len bytes from src into dst (the same or disjoint buffers) and
  // writes the tag. Fails only when OpenSSL does (out of memory).
  Status Seal(const SealId& id, const uint8_t* src, uint8_t* dst, size_t len,
              uint8_t tag[kSealTagBytes]) const;
  // Decrypts len bytes of data in place and checks the tag. On failure the
  // bytes are not the page: the caller reads it again or zeroes them.
  Status Open(const SealId& id, uint8_t* data, size_t len, const uint8_t tag[kSealTagBytes]) const;

  // Whether mlock kept the key out of swap (RLIMIT_MEMLOCK may refuse it).
  bool key_locked() const { return locked_; }
  // Whether it seals about as fast as a page is copied: intel-ipsec-mb with
  // VAES (AVX-512), 12-20 GB/s a core on the build machine. Elsewhere (its
  // AVX2 or SSE code, OpenSSL) it is about a quarter of that.
  bool seals_at_copy_speed() const;
  // The implementation in use: kIpsecMb or kOpenSsl.
  CipherLib lib() const { return mb_ != nullptr ? CipherLib::kIpsecMb : CipherLib::kOpenSsl; }
  // It in words, with its version and code path, for logs and the bench:
  // "intel-ipsec-mb 1.3.0 (AVX-512, VAES)", "OpenSSL 3.0.19 27 Jan 2026".
  std::string lib_name() const;
  // For tests that look for the key where it must not be: copies it to out.
  void CopyKeyForTest(uint8_t out[32]) const;
  // Wipes the key and intel-ipsec-mb's expanded key, once the seals and
  // opens under way end; every later Seal and Open fails. For the process's
  // exit, where the cipher is never destroyed (threads may still call it).
  void Wipe() EXCLUDES(key_mu_);
  bool wiped() const EXCLUDES(key_mu_);

 private:
  PageCipher() = default;
  static Result<std::unique_ptr<PageCipher>> CreateWith(CipherLib lib, const uint8_t* key);
  Status SealWithIpsecMb(const SealId& id, const uint8_t* src, uint8_t* dst, size_t len,
                         uint8_t tag[kSealTagBytes]) const;
  Status OpenWithIpsecMb(const SealId& id, uint8_t* data, size_t len,
                         const uint8_t tag[kSealTagBytes]) const;

  // Held shared by Seal and Open while they use the key, alone by Wipe.
  mutable SharedMutex key_mu_;
  bool wiped_ GUARDED_BY(key_mu_) = false;
  uint8_t* key_ = nullptr;  // its own page: locked, not dumped
  bool locked_ = false;
  EVP_CIPHER* aes_gcm_ = nullptr;  // OpenSSL's
  IMB_MGR* mb_ = nullptr;          // intel-ipsec-mb's, when it is in use
  const void* mb_key_ = nullptr;   // its expanded key, in key_'s page
};

}  // namespace kvtier
