// simt_fault_probe <case>: runs a faulty kernel that must stop the process
// (UBSan bounds checks abort it); ctest checks the exit code and the message.
#include "ember/simt/prelude.hpp"
// clang-format off
#include "kernels/faults.cuh"
// clang-format on

#include <cstdio>
#include <cstring>

#include "ember/core/launch.hpp"

int main(int argc, char** argv) {
  ember::simt::set_worker_threads(1);
  int out = 0;
  const char* which = argc > 1 ? argv[1] : "";
  if (std::strcmp(which, "static_shared_oob") == 0) {
    ember::launch(static_shared_oob_kernel, dim3(1), dim3(8, 4), 0, nullptr, &out, 1);
  } else if (std::strcmp(which, "static_shared_ok") == 0) {
    ember::launch(static_shared_oob_kernel, dim3(1), dim3(8, 4), 0, nullptr, &out, 0);
  } else {
    std::fprintf(stderr, "usage: simt_fault_probe static_shared_oob|static_shared_ok\n");
    return 2;
  }
  std::printf("finished\n");
  return 0;
}
