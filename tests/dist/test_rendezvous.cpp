// The TCP rendezvous of torchrun-style launches: rank 0's bytes reach every rank, in processes
// started like torchrun's (here: forked), and a missing rank is an Error within the timeout.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <vector>

#include "dist/backend.hpp"
#include "test_support.hpp"

namespace ember::dist {
namespace {

// A port that was free a moment ago.
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

Launch env_launch(int rank, int world, int port) {
  return Launch{.rank = rank,
                .world_size = world,
                .local_rank = rank,
                .launcher = "env",
                .master_addr = "127.0.0.1",
                .master_port = port};
}

TEST(Rendezvous, RankZeroBytesReachEveryRank) {
  const int port = free_port();
  constexpr int kWorld = 4;
  std::vector<pid_t> children;
  for (int r = 1; r < kWorld; ++r) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {  // a rank: exit 0 when it got rank 0's bytes
      std::array<char, 128> got{};
      try {
        detail::tcp_rendezvous_broadcast(env_launch(r, kWorld, port), got.data(), got.size(), 20);
      } catch (...) {
        ::_exit(2);
      }
      for (size_t i = 0; i < got.size(); ++i) {
        if (got[i] != static_cast<char>(i * 7 + 1)) ::_exit(3);
      }
      ::_exit(0);
    }
    children.push_back(pid);
  }
  std::array<char, 128> id{};
  for (size_t i = 0; i < id.size(); ++i) id[i] = static_cast<char>(i * 7 + 1);
  detail::tcp_rendezvous_broadcast(env_launch(0, kWorld, port), id.data(), id.size(), 20);
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  }
}

TEST(Rendezvous, MissingRanksAndAMissingRankZeroAreErrors) {
  const int port = free_port();
  char byte = 0;
  testing::expect_error(
      [&] { detail::tcp_rendezvous_broadcast(env_launch(0, 3, port), &byte, 1, 0.3); },
      {"the rendezvous on 127.0.0.1:", "timed out after 0.3 s on rank 0 of 3",
       "rank(s) 1, 2 never connected"});
  testing::expect_error(
      [&] { detail::tcp_rendezvous_broadcast(env_launch(2, 3, port), &byte, 1, 0.3); },
      {"rank 2 of 3 could not get the rendezvous data from rank 0 at 127.0.0.1:", "within 0.3 s"});
  testing::expect_error(
      [&] {
        Launch l = env_launch(1, 2, port);
        l.master_addr = "no-such-host.invalid";
        detail::tcp_rendezvous_broadcast(l, &byte, 1, 0.3);
      },
      "cannot resolve 'no-such-host.invalid'");
}

}  // namespace
}  // namespace ember::dist
