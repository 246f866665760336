// Flags, the kvtier-bench subcommands' one parser: every kind of flag, both
// value forms, and one message per kind of bad argument.
#include "tools/bench/bench_args.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kvtier::bench {
namespace {

struct Parsed {
  Status status;
  bool help = false;
};

// Parses `args` (without the program name) against `flags`.
Parsed ParseArgs(const Flags& flags, std::vector<std::string> args) {
  std::vector<char*> argv = {const_cast<char*>("kvtier-bench-test")};
  for (std::string& a : args) argv.push_back(a.data());
  Parsed p;
  p.status = flags.Parse(static_cast<int>(argv.size()), argv.data(), &p.help);
  return p;
}

struct Values {
  std::string dir = "/d";
  std::string mode = "auto";
  int qd = 8;
  double qps = 0.1;
  uint64_t size = 0;
  bool check = false;
  std::vector<std::string> seen;
};

Flags MakeFlags(Values* v) {
  Flags flags("test");
  flags.Text("--dir", &v->dir)
      .Choice("--mode", &v->mode, {"auto", "on", "off"})
      .Integer("--qd", &v->qd, 1, 256)
      .Number("--qps", &v->qps)
      .Size("--size", &v->size, 32u << 20)
      .Switch("--check", &v->check)
      .Custom("--name", [v](const std::string& s) {
        if (s == "bad") return Status::Error("not that one");
        v->seen.push_back(s);
        return Status::Ok();
      });
  return flags;
}

TEST(BenchFlags, StoresEachKindInBothForms) {
  Values v;
  const Flags flags = MakeFlags(&v);
  Parsed p = ParseArgs(flags, {"--dir", "/x", "--mode=off", "--qd", "16", "--qps=0.5", "--size",
                               "1G", "--check", "--name", "a", "--name=b", "--qd=32"});
  ASSERT_TRUE(p.status.ok()) << p.status.message();
  EXPECT_FALSE(p.help);
  EXPECT_EQ(v.dir, "/x");
  EXPECT_EQ(v.mode, "off");
  EXPECT_EQ(v.qd, 32);  // the last one wins
  EXPECT_EQ(v.qps, 0.5);
  EXPECT_EQ(v.size, uint64_t{1} << 30);
  EXPECT_TRUE(v.check);
  EXPECT_EQ(v.seen, (std::vector<std::string>{"a", "b"}));
}

TEST(BenchFlags, HelpAnywhereStoresNothing) {
  Values v;
  const Flags flags = MakeFlags(&v);
  Parsed p = ParseArgs(flags, {"--qd", "16", "--bogus", "-h"});
  EXPECT_TRUE(p.status.ok());
  EXPECT_TRUE(p.help);
  EXPECT_EQ(v.qd, 8);
  // As a flag's value, "-h" is the value.
  Values w;
  const Flags other = MakeFlags(&w);
  Parsed q = ParseArgs(other, {"--dir", "-h"});
  EXPECT_TRUE(q.status.ok()) << q.status.message();
  EXPECT_FALSE(q.help);
  EXPECT_EQ(w.dir, "-h");
}

TEST(BenchFlags, EachBadArgumentGetsOneLineNamingIt) {
  const struct {
    std::vector<std::string> args;
    const char* message;
  } cases[] = {
      {{"--bogus", "1"}, "unknown option --bogus (see --help)"},
      {{"stray"}, "stray: unexpected argument (see --help)"},
      {{"--dir"}, "--dir needs a value"},
      {{"--dir="}, "--dir=: empty value"},
      {{"--check=1"}, "--check takes no value"},
      {{"--mode", "maybe"}, "--mode=maybe: use one of auto, on, off"},
      {{"--qd", "0"}, "--qd=0: expected a whole number from 1 to 256"},
      {{"--qd", "8x"}, "--qd=8x: expected a whole number from 1 to 256"},
      {{"--qd", "99999999999999999999"},
       "--qd=99999999999999999999: expected a whole number from 1 to 256"},
      {{"--qps", "-1"}, "--qps=-1: expected a number >= 0"},
      {{"--qps", "nan"}, "--qps=nan: expected a number >= 0"},
      {{"--size", "1M"}, "--size=1M: at least 32 MiB"},
      {{"--size", "1.5G"}, "--size=1.5G: not a whole number (write 1536M, not 1.5G)"},
      {{"--name", "bad"}, "--name=bad: not that one"},
      {{"--qd", "1\n2"}, "--qd=1\\x0a2: expected a whole number from 1 to 256"},
  };
  for (const auto& c : cases) {
    Values v;
    const Flags flags = MakeFlags(&v);
    Parsed p = ParseArgs(flags, c.args);
    ASSERT_FALSE(p.status.ok()) << c.message;
    EXPECT_EQ(p.status.message().rfind(c.message, 0), 0u)
        << "got: " << p.status.message() << "\nwanted: " << c.message;
    EXPECT_EQ(p.status.message().find('\n'), std::string::npos) << p.status.message();
  }
}

}  // namespace
}  // namespace kvtier::bench
