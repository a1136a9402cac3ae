// train::Metrics: the Prometheus text exposition (format 0.0.4) checked line by line with a
// parser of the format, the textfile-collector file, and the HTTP endpoint scraped over a socket.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>

#include "ember/core/tensor.hpp"
#include "ember/train/metrics.hpp"
#include "test_support.hpp"

namespace {

using ember::Device;
using ember::testing::expect_error;
using ember::train::Metrics;

// The text format's rules that matter to a scraper: every sample's metric has a # HELP and a
// # TYPE line before it, names and labels are well-formed, values are numbers. Returns the
// samples, "name{labels}" -> value.
std::map<std::string, double> parse_exposition(const std::string& text) {
  std::map<std::string, double> samples;
  std::map<std::string, std::string> types;
  const std::regex help(R"(# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) .+)");
  const std::regex type(
      R"(# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram|summary|untyped))");
  const std::regex sample(
      R"re(([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="[^"\\\n]*",?)*\})? ([-+]?([0-9.]+([eE][-+]?[0-9]+)?|Inf|NaN)))re");
  std::istringstream in(text);
  std::string line;
  std::smatch m;
  while (std::getline(in, line)) {
    if (std::regex_match(line, m, help)) continue;
    if (std::regex_match(line, m, type)) {
      types[m[1]] = m[2];
      continue;
    }
    EXPECT_TRUE(std::regex_match(line, m, sample)) << "not a sample line: " << line;
    if (m.empty()) continue;
    std::string family = m[1];
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      if (!types.count(family) && family.ends_with(suffix)) {
        family = family.substr(0, family.size() - std::string(suffix).size());
      }
    }
    EXPECT_TRUE(types.count(family)) << "no # TYPE before " << line;
    samples[std::string(m[1]) + std::string(m[2])] = std::stod(m[4] == "+Inf" ? "inf" : m[4].str());
  }
  return samples;
}

std::string scrape(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  const std::string request = "GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n";
  EXPECT_EQ(::send(fd, request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
  std::string response;
  char buffer[4096];
  for (ssize_t n; (n = ::recv(fd, buffer, sizeof buffer, 0)) > 0;) response.append(buffer, n);
  ::close(fd);
  return response;
}

TEST(Metrics, TheExpositionFollowsTheTextFormat) {
  Metrics metrics("unit_test", Device::cpu(), "tokens");
  const ember::Tensor held = ember::Tensor::zeros({1 << 16});  // something allocated
  metrics.record_step(0.020, 4096, 3.5, 0.25);
  metrics.record_step(0.300, 4096, 3.25, std::nullopt);
  ember::train::StepBreakdown b;
  b.steps = 2;
  b.step_seconds = 0.32;
  b.seconds[static_cast<size_t>(ember::train::StepPhase::data)] = 0.08;
  metrics.record_breakdown(b);
  const auto samples = parse_exposition(metrics.exposition());
  const std::string job = R"({job="unit_test",device="cpu"})";
  EXPECT_EQ(samples.at("ember_steps_total" + job), 2);
  EXPECT_EQ(samples.at("ember_tokens_total" + job), 8192);
  EXPECT_NEAR(samples.at("ember_tokens_per_second" + job), 4096 / 0.3, 1e-6);
  EXPECT_EQ(samples.at("ember_loss" + job), 3.25);
  EXPECT_EQ(samples.count("ember_mfu" + job), 0u);  // the last step's MFU is unknown
  EXPECT_NEAR(samples.at("ember_data_wait_fraction" + job), 0.25, 1e-12);
  EXPECT_EQ(samples.at("ember_step_seconds_count" + job), 2);
  EXPECT_NEAR(samples.at("ember_step_seconds_sum" + job), 0.32, 1e-12);
  // Buckets are cumulative: 0.02 s falls in le=0.025 and above, 0.3 s in le=0.5 and above.
  auto bucket = [&](const char* le) {
    return samples.at(
        std::string(R"(ember_step_seconds_bucket{job="unit_test",device="cpu",le=")") + le + "\"}");
  };
  EXPECT_EQ(bucket("0.01"), 0);
  EXPECT_EQ(bucket("0.025"), 1);
  EXPECT_EQ(bucket("0.25"), 1);
  EXPECT_EQ(bucket("0.5"), 2);
  EXPECT_EQ(bucket("+Inf"), 2);
  EXPECT_GE(samples.at("ember_memory_allocated_bytes" + job), 4.0 * (1 << 16));
  EXPECT_GE(samples.at("ember_memory_reserved_bytes" + job),
            samples.at("ember_memory_allocated_bytes" + job));
  EXPECT_EQ(samples.count("ember_gpu_utilization_ratio" + job), 0u);  // no GPU, no NVML lines
}

TEST(Metrics, TheTextfileIsWrittenWhole) {
  Metrics metrics("file_test", Device::cpu(), "samples");
  metrics.record_step(0.01, 128, 0.5, std::nullopt);
  const auto dir =
      std::filesystem::temp_directory_path() / ("ember_metrics_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "ember.prom").string();
  metrics.write_file(path);
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(parse_exposition(text).at(R"(ember_samples_total{job="file_test",device="cpu"})"), 128);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  expect_error([&] { metrics.write_file("/nonexistent/dir/ember.prom"); },
               {"train::Metrics: cannot write /nonexistent/dir/ember.prom.tmp"});
  std::filesystem::remove_all(dir);
}

TEST(Metrics, TheEndpointServesTheExposition) {
  Metrics metrics("http_test", Device::cpu(), "tokens");
  metrics.record_step(0.05, 1000, 2.0, 0.4);
  int port = 0;
  try {
    port = metrics.serve(0);
  } catch (const ember::Error& e) {
    GTEST_SKIP() << e.message();  // a build without cpp-httplib
  }
  ASSERT_GT(port, 0);
  const std::string response = scrape(port);
  ASSERT_NE(response.find("200 OK"), std::string::npos) << response;
  EXPECT_NE(response.find("text/plain; version=0.0.4"), std::string::npos);
  const std::string body = response.substr(response.find("\r\n\r\n") + 4);
  const auto samples = parse_exposition(body);
  EXPECT_EQ(samples.at(R"(ember_mfu{job="http_test",device="cpu"})"), 0.4);
  metrics.record_step(0.05, 1000, 1.5, 0.4);  // a later scrape sees the new step
  const std::string again = scrape(port);
  EXPECT_NE(again.find(R"(ember_loss{job="http_test",device="cpu"} 1.5)"), std::string::npos);
  expect_error([&] { metrics.serve(0); }, {"already serving"});
  Metrics other("other", Device::cpu(), "tokens");
  expect_error([&] { other.serve(port); }, {"cannot listen on port"});
  expect_error([] { Metrics("bad\"name", Device::cpu(), "tokens"); }, {"the job name"});
}

}  // namespace
