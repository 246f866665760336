// kvtier-bench: dispatches to the subcommand named by the first argument.
// The subcommands are the rows of commands.def. Thread-safety: main only.
#include <cstdio>
#include <cstring>

namespace kvtier::bench {

#define KVTIER_BENCH_COMMAND(name, function, summary) int function(int argc, char** argv);
#include "tools/bench/commands.def"
#undef KVTIER_BENCH_COMMAND

namespace {

struct Command {
  const char* name;
  int (*run)(int argc, char** argv);
  const char* summary;
};

constexpr Command kCommands[] = {
#define KVTIER_BENCH_COMMAND(name, function, summary) {#name, function, summary},
#include "tools/bench/commands.def"
#undef KVTIER_BENCH_COMMAND
};

int Usage(FILE* out) {
  fprintf(out,
          "usage: kvtier-bench <command> [options]   (kvtier-bench <command> --help for its "
          "options)\n\ncommands:\n");
  for (const Command& c : kCommands) fprintf(out, "  %-12s %s\n", c.name, c.summary);
  return out == stdout ? 0 : 2;
}

}  // namespace
}  // namespace kvtier::bench

int main(int argc, char** argv) {
  using namespace kvtier::bench;
  if (argc < 2) return Usage(stderr);
  if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0 ||
      strcmp(argv[1], "help") == 0) {
    return Usage(stdout);
  }
  for (const Command& c : kCommands) {
    if (strcmp(argv[1], c.name) == 0) return c.run(argc - 1, argv + 1);
  }
  fprintf(stderr, "kvtier-bench: unknown command '%s'\n", argv[1]);
  return Usage(stderr);
}
