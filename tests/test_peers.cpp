// Run by ctest under `mpiexec -n 1|2|3` (and across test hosts: ctest cluster.probes):
// every rank learns where every rank runs, opens a probe port where the ranks reach each other,
// and answers its peers' probes but not strangers (peers.hpp). The probe port itself, one process:
// test_probe_port.cpp.
//
// Every rank runs every collective unconditionally (EXPECT, not ASSERT, between collectives), so
// a failed check on one rank does not leave the ranks out of step for the tests that follow.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "mpibert/core/process.hpp"
#include "mpibert/core/time.hpp"
#include "mpibert/runtime/host_collectives.hpp"
#include "mpibert/runtime/peers.hpp"

namespace mpibert {
namespace {

class Peers : public ::testing::Test {
 protected:
  int rank_ = world_rank(), size_ = world_size();
};

// Every rank learns where every rank runs, and while all of them live every probe is answered
// (the outcomes for a dead host or process: test_probe_port, and across test hosts: ctest
// cluster.hosts; every rank on test hosts of which two are multi-homed: ctest cluster.probes).
TEST_F(Peers, PeersArePublishedAndAnswerProbes) {
  publish_peer_addresses();
  const std::vector<std::string> hosts = peer_hosts();
  ASSERT_EQ(hosts.size(), static_cast<size_t>(size_));
  EXPECT_EQ(hosts[static_cast<size_t>(rank_)], host_name());
  const auto probes = probe_peers(5.0);
  ASSERT_EQ(probes.size(), static_cast<size_t>(size_ - 1));
  for (const PeerProbe& probe : probes) {
    EXPECT_NE(probe.rank, rank_);
    EXPECT_EQ(probe.outcome, PeerProbe::Outcome::kAnswers) << summarize_probes(probes, 5.0);
  }
  if (size_ > 1) {
    EXPECT_EQ(summarize_probes(probes, 5.0).rfind("every other rank's process answers", 0), 0u);
  }
  barrier("after the probes");
}

// ---- Probe ports: where they listen, and what a stranger gets ----

struct Endpoint {
  std::string ip;
  int port = 0;
};

Endpoint endpoint_of(const std::string& address) {
  Endpoint endpoint;
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return endpoint;
  endpoint.ip = address.substr(0, colon);
  endpoint.port = std::stoi(address.substr(colon + 1));
  return endpoint;
}

// What a client without the job's token sees: whether it connected, what came back, and whether
// the other end closed within `seconds`.
struct Exchange {
  bool refused = false, connected = false, closed = false;
  std::string received;
};

Exchange exchange(const std::string& ip, int port, const std::string& payload, double seconds) {
  Exchange result;
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, ip.c_str(), &address.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    result.refused = errno == ECONNREFUSED;
    close(fd);
    return result;
  }
  result.connected = true;
  timeval timeout{};
  timeout.tv_sec = static_cast<time_t>(seconds);
  timeout.tv_usec = static_cast<suseconds_t>((seconds - static_cast<double>(timeout.tv_sec)) * 1e6);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  if (!payload.empty()) send(fd, payload.data(), payload.size(), MSG_NOSIGNAL);
  char buffer[256];
  for (;;) {
    const ssize_t n = recv(fd, buffer, sizeof buffer, 0);
    if (n > 0) {
      result.received.append(buffer, static_cast<size_t>(n));
      continue;
    }
    result.closed = n == 0 || errno == ECONNRESET;  // else the wait ran out
    break;
  }
  close(fd);
  return result;
}

// The address this host sends from towards `host` (what the kernel's routes pick), found here
// with a UDP socket's connect, which sends nothing; empty when `host` does not resolve.
std::string source_address_towards(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0 || found == nullptr) return "";
  sockaddr_in address = *reinterpret_cast<sockaddr_in*>(found->ai_addr);
  freeaddrinfo(found);
  address.sin_port = htons(9);
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  socklen_t length = sizeof address;
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0;
  close(fd);
  char text[INET_ADDRSTRLEN] = {};
  return ok ? inet_ntop(AF_INET, &address.sin_addr, text, sizeof text) : "";
}

// Loopback when every rank runs on this host, else each address this host sends from towards
// another rank's host (one per interface the ranks use: two on a multi-homed host that reaches
// hosts through different interfaces); the same port on another address of this host is refused
// (the port is not bound to all interfaces). Across test hosts, two of them multi-homed: ctest
// cluster.probes.
TEST_F(Peers, ProbePortListensWhereTheRanksMeetOnly) {
  publish_peer_addresses();
  const std::vector<std::string> hosts = peer_hosts();
  std::vector<std::string> expected_ips;
  for (const std::string& host : hosts) {
    const std::string ip = host == hosts.at(static_cast<size_t>(rank_)) ? "" : source_address_towards(host);
    if (!ip.empty() && std::find(expected_ips.begin(), expected_ips.end(), ip) == expected_ips.end()) expected_ips.push_back(ip);
  }
  if (expected_ips.empty()) expected_ips.push_back("127.0.0.1");  // every rank on this host
  std::vector<std::string> ips;
  for (const std::string& address : own_probe_addresses()) {
    const Endpoint own = endpoint_of(address);
    ips.push_back(own.ip);
    EXPECT_NE(own.port, 0) << "rank " << rank_ << ": " << address;
    // All of 127/8 is this host: 127.0.0.2 reaches it, through another address than the port's.
    const std::string elsewhere = own.ip == "127.0.0.1" ? "127.0.0.2" : "127.0.0.1";
    const Exchange other = exchange(elsewhere, own.port, "", 5.0);
    EXPECT_TRUE(other.refused) << "rank " << rank_ << ": " << elsewhere << ":" << own.port
                               << (other.connected ? " accepted a connection" : " did not refuse");
  }
  std::sort(ips.begin(), ips.end());
  std::sort(expected_ips.begin(), expected_ips.end());
  EXPECT_EQ(ips, expected_ips) << "rank " << rank_ << " on " << hosts.at(static_cast<size_t>(rank_));
  const std::vector<std::string> probed = peer_probe_addresses();
  EXPECT_EQ(probed.size(), static_cast<size_t>(size_));
  const std::vector<std::string> own = own_probe_addresses();
  EXPECT_NE(std::find(own.begin(), own.end(), probed.at(static_cast<size_t>(rank_))), own.end())
      << "rank " << rank_ << " would probe itself at " << probed.at(static_cast<size_t>(rank_));
  barrier("after the probe ports' addresses");
}

// Clients without the token, from the next rank's host: another protocol's request, a token sent
// in the clear (as probes once did), junk, a hello of the probes' protocol followed by a wrong
// proof, and more idle connections than the listener keeps. The first three are closed without a
// byte, the hello is sent the listener's nonce and nothing more; every rank's port still answers
// the real probes.
TEST_F(Peers, ProbePortDropsStrangersAndCarriesOn) {
  publish_peer_addresses();
  const Endpoint next = endpoint_of(peer_probe_addresses().at(static_cast<size_t>((rank_ + 1) % size_)));
  struct Stranger {
    std::string what, payload;
    size_t reply_bytes;
  };
  const std::vector<Stranger> strangers = {
      {"an HTTP request", "GET / HTTP/1.0\r\n\r\n", 0},
      {"a token in the clear", std::string(32, 'x'), 0},
      {"4 KiB of junk", std::string(4096, '\xff'), 0},
      {"a hello and a wrong proof", "mbprobe2" + std::string(32, 'n') + std::string(32, 'p'), 32},
  };
  for (const Stranger& stranger : strangers) {
    const auto start = Clock::now();
    const Exchange got = exchange(next.ip, next.port, stranger.payload, 10.0);
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    EXPECT_TRUE(got.connected) << stranger.what << " to " << next.ip << ":" << next.port;
    EXPECT_TRUE(got.closed) << stranger.what << ": still open after " << seconds << " s";
    EXPECT_EQ(got.received.size(), stranger.reply_bytes) << stranger.what << " got more than a nonce";
  }
  std::vector<int> crowd;
  for (int i = 0; i < 100; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(next.port));
    inet_pton(AF_INET, next.ip.c_str(), &address.sin_addr);
    if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0) {
      crowd.push_back(fd);
    } else {
      close(fd);
    }
  }
  EXPECT_EQ(crowd.size(), 100u) << "idle connections to " << next.ip << ":" << next.port;
  barrier("after the strangers' connections");
  const auto probes = probe_peers(5.0);
  EXPECT_EQ(probes.size(), static_cast<size_t>(size_ - 1));
  for (const PeerProbe& probe : probes) {
    EXPECT_EQ(probe.outcome, PeerProbe::Outcome::kAnswers) << summarize_probes(probes, 5.0);
  }
  for (const int fd : crowd) close(fd);
  barrier("after the probes past the strangers");
}

TEST(Placement, GroupsConsecutiveRanksByHost) {
  EXPECT_EQ(describe_placement({"h1", "h1", "h2", "h2", "h2"}), "h1 (ranks 0-1), h2 (ranks 2-4)");
  EXPECT_EQ(describe_placement({"a", "b", "a"}), "a (rank 0), b (rank 1), a (rank 2)");
  EXPECT_EQ(describe_placement({}), "");
}

}  // namespace
}  // namespace mpibert
