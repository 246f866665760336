// kvtier-config: shows and documents kvtier's KVTIER_* configuration.
//
//   kvtier-config                      parse the environment as kvtier would and
//                                      print the effective configuration
//   kvtier-config --markdown           print the README's variable table
//   kvtier-config --check-readme FILE  check FILE's table against options.def
//
// Exit status: 0 fine; 1 the README table differs; 2 a bad KVTIER_* value, a
// usage error or an unreadable file. Single-threaded.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/options.h"

namespace {

constexpr const char* kBegin = "<!-- options:begin -->";
constexpr const char* kEnd = "<!-- options:end -->";

void Usage(FILE* out) {
  fprintf(out,
          "usage: kvtier-config                      print the effective KVTIER_* configuration\n"
          "       kvtier-config --markdown           print the README variable table\n"
          "       kvtier-config --check-readme FILE  check the table between %s and %s\n",
          kBegin, kEnd);
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Prints the lines only in `a` as "-" and those only in `b` as "+", in order,
// from a longest common subsequence (tables are tens of lines).
void PrintDiff(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  std::vector<std::vector<size_t>> lcs(a.size() + 1, std::vector<size_t>(b.size() + 1, 0));
  for (size_t i = a.size(); i-- > 0;) {
    for (size_t j = b.size(); j-- > 0;) {
      lcs[i][j] = a[i] == b[j] ? lcs[i + 1][j + 1] + 1 : std::max(lcs[i + 1][j], lcs[i][j + 1]);
    }
  }
  size_t i = 0, j = 0;
  while (i < a.size() || j < b.size()) {
    if (i < a.size() && j < b.size() && a[i] == b[j]) {
      ++i, ++j;
    } else if (j == b.size() || (i < a.size() && lcs[i + 1][j] >= lcs[i][j + 1])) {
      printf("-%s\n", a[i++].c_str());
    } else {
      printf("+%s\n", b[j++].c_str());
    }
  }
}

int CheckReadme(const char* path) {
  std::ifstream in(path);
  if (!in) {
    fprintf(stderr, "kvtier-config: cannot read %s: %s\n", path, strerror(errno));
    return 2;
  }
  std::vector<std::string> found;
  int state = 0;  // 0 before the begin marker, 1 inside, 2 after the end marker
  for (std::string line; state < 2 && std::getline(in, line);) {
    if (state == 0 && line.find(kBegin) != std::string::npos) {
      state = 1;
    } else if (state == 1 && line.find(kEnd) != std::string::npos) {
      state = 2;
    } else if (state == 1) {
      found.push_back(line);
    }
  }
  if (state != 2) {
    printf("%s: no table between %s and %s (add both markers, then run scripts/gen-options-doc)\n",
           path, kBegin, kEnd);
    return 1;
  }
  // Blank lines around the table are allowed.
  while (!found.empty() && found.front().empty()) found.erase(found.begin());
  while (!found.empty() && found.back().empty()) found.pop_back();
  const std::vector<std::string> wanted = Lines(kvtier::OptionsMarkdownTable());
  if (found == wanted) return 0;
  printf("%s: the variable table differs from runtime/options.def (run scripts/gen-options-doc)\n",
         path);
  printf("--- %s\n+++ generated from runtime/options.def\n", path);
  PrintDiff(found, wanted);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 1) {
    kvtier::Result<kvtier::Options> options = kvtier::ParseOptions(kvtier::ProcessEnv());
    if (!options.ok()) {
      fprintf(stderr, "kvtier: %s\n", options.status().message().c_str());
      return 2;
    }
    kvtier::DumpOptions(options.value(), stdout);
    return 0;
  }
  const std::string arg = argv[1];
  if (arg == "--markdown" && argc == 2) {
    fputs(kvtier::OptionsMarkdownTable().c_str(), stdout);
    return 0;
  }
  if (arg == "--check-readme" && argc == 3) return CheckReadme(argv[2]);
  if ((arg == "--help" || arg == "-h") && argc == 2) {
    Usage(stdout);
    return 0;
  }
  Usage(stderr);
  return 2;
}
