// main() for the fuzz targets where there is no libFuzzer (gcc builds):
// runs LLVMFuzzerTestOneInput once on every file named, and on every file of
// every directory named, so the checked-in corpus is a regression test in
// the release and ASan builds. Prints how many inputs ran; a crash or a
// failed check in the target fails the test.
//   fuzz_<target>_replay FILE_OR_DIR...
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::vector<fs::path> inputs;
  for (int i = 1; i < argc; ++i) {
    const fs::path p(argv[i]);
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      for (const auto& e : fs::directory_iterator(p)) {
        if (e.is_regular_file()) inputs.push_back(e.path());
      }
    } else if (fs::is_regular_file(p, ec)) {
      inputs.push_back(p);
    } else {
      fprintf(stderr, "%s: %s: no such file or directory\n", argv[0], argv[i]);
      return 2;
    }
  }
  if (inputs.empty()) {
    fprintf(stderr, "%s: no inputs\n", argv[0]);
    return 2;
  }
  for (const fs::path& p : inputs) {
    std::ifstream in(p, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  printf("%s: %zu inputs ran\n", argv[0], inputs.size());
  return 0;
}
