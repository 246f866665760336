// Sizes as people write them and byte counts as they read them (units.h).
#include "runtime/units.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

namespace kvtier {
namespace {

constexpr uint64_t kKiB = 1024, kMiB = kKiB << 10, kGiB = kMiB << 10, kTiB = kGiB << 10;

TEST(ParseSize, AcceptsWholeNumbersWithBinarySuffixes) {
  const struct {
    const char* text;
    uint64_t bytes;
  } cases[] = {
      {"4096", 4096},
      {"0", 0},
      {"7B", 7},
      {"7b", 7},
      {"1024K", 1024 * kKiB},
      {"64KiB", 64 * kKiB},
      {"64kib", 64 * kKiB},
      {"64kB", 64 * kKiB},
      {"512M", 512 * kMiB},
      {"5MB", 5 * kMiB},
      {"3mib", 3 * kMiB},
      {"2G", 2 * kGiB},
      {"2g", 2 * kGiB},
      {"2GiB", 2 * kGiB},
      {"40GB", 40 * kGiB},
      {"1T", kTiB},
      {"1tib", kTiB},
      {"007M", 7 * kMiB},
      {"16777215T", 16777215 * kTiB},
      {"18446744073709551615", UINT64_MAX},
  };
  for (const auto& c : cases) {
    Result<uint64_t> r = ParseSize(c.text);
    ASSERT_TRUE(r.ok()) << c.text << ": " << r.status().message();
    EXPECT_EQ(r.value(), c.bytes) << c.text;
  }
}

TEST(ParseSize, RejectsEmptyNegativeFractionsOverflowAndJunk) {
  const struct {
    const char* text;
    const char* reason;
  } cases[] = {
      {"", "empty value"},
      {"-1", "negative size"},
      {"-1M", "negative size"},
      {"1.5G", "not a whole number (write 1536M, not 1.5G)"},
      {"0.5", "not a whole number (write 1536M, not 1.5G)"},
      {"1,5G", "not a whole number (write 1536M, not 1.5G)"},
      {"99999999999999999999G", "too large"},
      {"18446744073709551616", "too large"},
      {"16777216T", "too large"},
      {"17179869184G", "too large"},
      {"M", "not a size"},
      {" 2M", "not a size"},
      {"+5", "not a size"},
      {"two", "not a size"},
      {"2Q", "unknown size suffix \"Q\" (use K, M, G or T, optionally with B or iB)"},
      {"2M ", "unknown size suffix \"M \" (use K, M, G or T, optionally with B or iB)"},
      {"2 M", "unknown size suffix \" M\" (use K, M, G or T, optionally with B or iB)"},
      {"2MiBs", "unknown size suffix \"MiBs\" (use K, M, G or T, optionally with B or iB)"},
      {"0x10", "unknown size suffix \"x10\" (use K, M, G or T, optionally with B or iB)"},
      {"1P", "unknown size suffix \"P\" (use K, M, G or T, optionally with B or iB)"},
  };
  for (const auto& c : cases) {
    Result<uint64_t> r = ParseSize(c.text);
    ASSERT_FALSE(r.ok()) << "\"" << c.text << "\" parsed as " << r.value();
    EXPECT_EQ(r.status().message(), c.reason) << c.text;
  }
}

TEST(FormatBytes, PrintsBinaryUnitsWithAtMostTwoDecimals) {
  const struct {
    uint64_t bytes;
    const char* text;
  } cases[] = {
      {0, "0 B"},
      {512, "512 B"},
      {1023, "1023 B"},
      {1024, "1 KiB"},
      {1536, "1.5 KiB"},
      {2 * kMiB, "2 MiB"},
      {kMiB - 1, "1 MiB"},
      {kGiB + kGiB / 2, "1.5 GiB"},
      {kGiB + kGiB / 4, "1.25 GiB"},
      {kGiB + kGiB / 3, "1.33 GiB"},
      {40 * kGiB, "40 GiB"},
      {kTiB, "1 TiB"},
      {1024 * kTiB, "1 PiB"},
      {UINT64_MAX, "16 EiB"},
  };
  for (const auto& c : cases) EXPECT_EQ(FormatBytes(c.bytes), c.text) << c.bytes;
}

TEST(EchoValue, ShowsOtherBytesAsEscapesAndCutsLongValues) {
  EXPECT_EQ(EchoValue("64M"), "64M");
  EXPECT_EQ(EchoValue(std::string("a\tb\xff", 4)), "a\\x09b\\xff");
  EXPECT_EQ(EchoValue(std::string(64, 'y')), std::string(64, 'y'));
  const std::string cut = EchoValue(std::string(500, 'x'));
  EXPECT_EQ(cut.size(), 64u);
  EXPECT_EQ(cut.substr(61), "...");
  EXPECT_LE(EchoValue(std::string(100, '\x01')).size(), 64u);
}

TEST(FormatBytesRounded, ThreeSignificantDigitsForColumns) {
  EXPECT_EQ(FormatBytesRounded(0), "0 B");
  EXPECT_EQ(FormatBytesRounded(1023), "1023 B");
  EXPECT_EQ(FormatBytesRounded(1536), "1.50 KiB");
  EXPECT_EQ(FormatBytesRounded(512ull << 20), "512 MiB");
  EXPECT_EQ(FormatBytesRounded(3 * kGiB), "3.00 GiB");
  EXPECT_EQ(FormatBytesRounded(32 * kGiB), "32.0 GiB");
  EXPECT_EQ(FormatBytesRounded(1023 * kGiB), "1.00 TiB");
}

}  // namespace
}  // namespace kvtier
