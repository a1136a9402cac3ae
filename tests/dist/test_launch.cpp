// dist::detect_launch: rank, world size and local rank from each launcher's variables.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "ember/dist/launch.hpp"
#include "test_support.hpp"

namespace ember::dist {
namespace {

Launch from(const std::map<std::string, std::string>& env) {
  return detect_launch([&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

TEST(Launch, NoLauncherIsOneProcess) {
  const Launch l = from({});
  EXPECT_EQ(l.rank, 0);
  EXPECT_EQ(l.world_size, 1);
  EXPECT_EQ(l.local_rank, 0);
  EXPECT_EQ(l.launcher, "single");
}

TEST(Launch, Mpirun) {
  const Launch l = from({{"OMPI_COMM_WORLD_RANK", "3"},
                         {"OMPI_COMM_WORLD_SIZE", "8"},
                         {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                         {"RANK", "7"}});  // mpirun's own variables win
  EXPECT_EQ(l.launcher, "mpirun");
  EXPECT_EQ(l.rank, 3);
  EXPECT_EQ(l.world_size, 8);
  EXPECT_EQ(l.local_rank, 1);
}

TEST(Launch, Slurm) {
  const Launch l = from({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "6"}, {"SLURM_LOCALID", "2"}});
  EXPECT_EQ(l.launcher, "slurm");
  EXPECT_EQ(l.rank, 5);
  EXPECT_EQ(l.world_size, 6);
  EXPECT_EQ(l.local_rank, 2);
}

TEST(Launch, TorchrunStyle) {
  const Launch l = from({{"RANK", "1"},
                         {"WORLD_SIZE", "2"},
                         {"LOCAL_RANK", "1"},
                         {"MASTER_ADDR", "10.0.0.1"},
                         {"MASTER_PORT", "29500"}});
  EXPECT_EQ(l.launcher, "env");
  EXPECT_EQ(l.rank, 1);
  EXPECT_EQ(l.world_size, 2);
  EXPECT_EQ(l.local_rank, 1);
  EXPECT_EQ(l.master_addr, "10.0.0.1");
  EXPECT_EQ(l.master_port, 29500);
  // One process needs no rendezvous.
  EXPECT_EQ(from({{"RANK", "0"}, {"WORLD_SIZE", "1"}}).world_size, 1);
}

TEST(Launch, BadVariablesNameTheVariable) {
  testing::expect_error(
      [&] {
        (void)from({{"OMPI_COMM_WORLD_RANK", "0"}});
      },
      "OMPI_COMM_WORLD_SIZE is not set");
  testing::expect_error(
      [&] {
        (void)from({{"SLURM_PROCID", "x1"}, {"SLURM_NTASKS", "2"}});
      },
      "SLURM_PROCID='x1' is not a non-negative integer");
  testing::expect_error(
      [&] {
        (void)from({{"RANK", "2"}, {"WORLD_SIZE", "2"}});
      },
      "RANK=2 is not below WORLD_SIZE=2");
  testing::expect_error([&] { (void)from({{"RANK", "-1"}, {"WORLD_SIZE", "2"}}); }, "RANK='-1'");
  testing::expect_error(
      [&] {
        (void)from({{"RANK", "0"}, {"WORLD_SIZE", "0"}});
      },
      "WORLD_SIZE=0 must be at least 1");
  testing::expect_error(
      [&] {
        (void)from({{"RANK", "0"}, {"WORLD_SIZE", "2"}});
      },
      "needs MASTER_ADDR");
  testing::expect_error(
      [&] {
        (void)from(
            {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}});
      },
      "MASTER_PORT=70000 is not a TCP port");
  testing::expect_error(
      [&] {
        (void)from({{"RANK", "0"}, {"WORLD_SIZE", "99999999999"}});
      },
      "WORLD_SIZE='99999999999' is not a non-negative integer");
  testing::expect_error(
      [&] {
        (void)from({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", ""}});
      },
      "SLURM_LOCALID='' is not a non-negative integer");
}

}  // namespace
}  // namespace ember::dist
