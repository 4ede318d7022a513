// The probe port in one process (probe_port.hpp): a port on loopback answers the job's probes and
// nothing else, and what a probe reports for a port that refuses, a token that differs, a target
// with no port. Across ranks and hosts: test_peers.cpp.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "mpibert/runtime/probe_port.hpp"

namespace mpibert {
namespace {

const std::string kToken(32, 't');
constexpr double kProbeSeconds = 3;

ProbeOutcome probe_one(const ProbeEndpoint& endpoint, int rank, const std::string& token = kToken) {
  return probe_ports({ProbeTarget{endpoint, rank}}, token, kProbeSeconds).at(0);
}

// A loopback port that nothing listens on: bound, never listening, so that no other test takes it.
class ClosedPort {
 public:
  ClosedPort() {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
  }
  ~ClosedPort() { close(fd_); }
  ClosedPort(const ClosedPort&) = delete;
  ClosedPort& operator=(const ClosedPort&) = delete;
  int port() const { return port_; }

 private:
  int fd_ = -1, port_ = 0;
};

TEST(ProbePort, ListensOnTheAddressesGivenAndAnswersTheJobsProbe) {
  ProbePort port({"127.0.0.1"}, kToken, 3);
  ASSERT_EQ(port.endpoints().size(), 1u);
  EXPECT_TRUE(port.problems().empty());
  EXPECT_EQ(port.endpoints()[0].ip, "127.0.0.1");
  EXPECT_NE(port.endpoints()[0].port, 0);
  EXPECT_EQ(probe_one(port.endpoints()[0], 3), ProbeOutcome::kAnswers);
}

TEST(ProbePort, SaysWhichAddressItCannotListenOn) {
  ProbePort port({"127.0.0.1", "not an address"}, kToken, 0);
  EXPECT_EQ(port.endpoints().size(), 1u);
  ASSERT_EQ(port.problems().size(), 1u);
  EXPECT_EQ(port.problems()[0].rfind("cannot listen on not an address: ", 0), 0u) << port.problems()[0];
}

TEST(ProbePort, AnotherJobsProbeIsNotAnswered) {
  ProbePort port({"127.0.0.1"}, kToken, 0);
  ASSERT_EQ(port.endpoints().size(), 1u);
  EXPECT_EQ(probe_one(port.endpoints()[0], 0, std::string(32, 'u')), ProbeOutcome::kNoReply);
}

TEST(ProbePort, ARefusedConnectionIsAProcessGoneAndNoPortIsUnresolved) {
  ClosedPort closed;
  const auto outcomes = probe_ports({ProbeTarget{ProbeEndpoint{"127.0.0.1", closed.port()}, 1}, ProbeTarget{ProbeEndpoint{}, 2}},
                                    kToken, kProbeSeconds);
  EXPECT_EQ(outcomes, (std::vector<ProbeOutcome>{ProbeOutcome::kProcessGone, ProbeOutcome::kUnresolved}));
}

}  // namespace
}  // namespace mpibert
