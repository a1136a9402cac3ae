// dist_fault_probe MODE: a rank that fails a collective, for the fault tests (run by ctest under
// mpirun -np 2). Rank 1 leaves after one good all-reduce; rank 0's next all-reduce must end with
// an ember::Error naming the collective, the rank and the timeout, never hang.
//   hang: rank 1 sleeps, alive but silent (a hung peer)
//   die:  rank 1 kills itself (SIGKILL; mpirun lets the others run on when started with
//         --mca orte_abort_on_non_zero_status 0, as under srun or torchrun-style launchers)
//   graph_hang: the all-reduce is captured into a CUDA graph and replayed; rank 1 sleeps after
//         the first replay, and rank 0's second replay must end by the watchdog's timeout
// DEVICE (cpu or cuda:0) picks the engine: MPI or NCCL.
#include <csignal>
#include <cstdio>
#include <string>
#include <thread>

#include "ember/core/error.hpp"
#include "ember/core/graph.hpp"
#include "ember/dist/communicator.hpp"

int main(int argc, char** argv) {
  using namespace ember;
  const std::string mode = argc > 1 ? argv[1] : "";
  const Device device = Device::parse(argc > 2 ? argv[2] : "cpu");
  if (mode != "hang" && mode != "die" && mode != "graph_hang") {
    std::fprintf(stderr, "usage: dist_fault_probe hang|die|graph_hang [DEVICE]\n");
    return 2;
  }
  auto comm = dist::init({.timeout_seconds = 3, .check_metadata = 0});
  try {
    Stream s = device.is_cpu() ? Stream() : current_stream(device);
    Tensor t = Tensor::full({1024}, 1.0, DType::f32, s);
    if (mode == "graph_hang") {
      Graph step = Graph::capture(s, [&] { comm->all_reduce(s, t).wait(s); });
      step.replay(s);
      std::printf("rank %d: first replay gave %g\n", comm->rank(), t.to_vector<float>()[0]);
      std::fflush(stdout);
      if (comm->rank() == 1) {
        std::this_thread::sleep_for(std::chrono::seconds(30));
        return 0;
      }
      step.replay(s);
      s.synchronize();                // returns once the watchdog has aborted the communicator
      comm->all_reduce(s, t).wait();  // which the next call reports
      std::printf("rank %d: the second replay returned without its peer\n", comm->rank());
      return 1;
    }
    comm->all_reduce(s, t).wait();
    std::printf("rank %d: first all_reduce gave %g\n", comm->rank(), t.to_vector<float>()[0]);
    std::fflush(stdout);
    if (comm->rank() == 1) {
      if (mode == "die") std::raise(SIGKILL);
      std::this_thread::sleep_for(std::chrono::seconds(30));
      return 0;
    }
    comm->all_reduce(s, t).wait();
    std::printf("rank %d: the second all_reduce returned without its peer\n", comm->rank());
    return 1;
  } catch (const Error& e) {
    std::fprintf(stderr, "rank %d caught: %s\n", comm->rank(), e.what());
    dist::abort_job(3);
  }
}
