#include "mpibert/runtime/peers.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <cerrno>
#include <chrono>
#include <map>
#include <sstream>

#include "mpibert/core/process.hpp"
#include "mpibert/runtime/host_collectives.hpp"

namespace mpibert {
namespace {

struct PeerAddress {
  std::string host;
  std::string ip;  // IPv4, resolved at setup; empty when the name did not resolve
  int port = 0;    // 0: that rank could not open a probe port
};

std::vector<PeerAddress> peer_addresses;

// Listens on an ephemeral port for the rest of the process and returns it (0 when that fails:
// the job runs on, its timeout reports just name fewer peers). The backlog is the system's
// maximum, as nothing ever accepts: a probe completes its handshake in the queue.
int open_probe_port() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t length = sizeof address;
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 || listen(fd, SOMAXCONN) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    close(fd);
    return 0;
  }
  return ntohs(address.sin_port);  // the descriptor stays open until the process ends
}

std::string resolve_ipv4(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0 || found == nullptr) return "";
  char text[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_addr, text, sizeof text);
  freeaddrinfo(found);
  return text;
}

// Starts a non-blocking connection; returns the descriptor (-1 when it already failed, with
// `outcome` set) or -2 when it connected at once.
int start_connection(const PeerAddress& peer, PeerProbe::Outcome& outcome) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(peer.port));
  inet_pton(AF_INET, peer.ip.c_str(), &address.sin_addr);
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    outcome = PeerProbe::Outcome::kNoAnswer;
    return -1;
  }
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0) {
    close(fd);
    outcome = PeerProbe::Outcome::kAnswers;
    return -2;
  }
  if (errno == EINPROGRESS) return fd;
  outcome = errno == ECONNREFUSED ? PeerProbe::Outcome::kProcessGone : PeerProbe::Outcome::kNoAnswer;
  close(fd);
  return -1;
}

PeerProbe::Outcome finished_connection(int fd) {
  int error = 0;
  socklen_t length = sizeof error;
  getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length);
  if (error == 0) return PeerProbe::Outcome::kAnswers;
  return error == ECONNREFUSED ? PeerProbe::Outcome::kProcessGone : PeerProbe::Outcome::kNoAnswer;
}

// Waits for the started connections until each has an outcome or `seconds` have passed; those
// still pending then did not answer.
void await_connections(std::vector<pollfd>& pending, std::vector<PeerProbe*>& waiting, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!pending.empty()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    if (poll(pending.data(), pending.size(), static_cast<int>(left.count())) < 0 && errno != EINTR) break;
    for (size_t i = pending.size(); i-- > 0;) {
      if (pending[i].revents == 0) continue;
      waiting[i]->outcome = finished_connection(pending[i].fd);
      close(pending[i].fd);
      pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
      waiting.erase(waiting.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }
  for (size_t i = 0; i < pending.size(); ++i) {
    waiting[i]->outcome = PeerProbe::Outcome::kNoAnswer;
    close(pending[i].fd);
  }
}

std::string describe_probe(const PeerProbe& probe, double seconds) {
  std::ostringstream out;
  out << "rank " << probe.rank << " on " << probe.host;
  switch (probe.outcome) {
    case PeerProbe::Outcome::kAnswers: out << " answers"; break;
    case PeerProbe::Outcome::kProcessGone:
      out << " is gone (" << probe.address << " refused: its host is up, the process is not)";
      break;
    case PeerProbe::Outcome::kNoAnswer:
      out << " does not answer (nothing from " << probe.address << " within " << seconds
          << " s: its host or the link to it is down)";
      break;
    case PeerProbe::Outcome::kUnresolved: out << " could not be probed (its host name did not resolve at setup)"; break;
  }
  return out.str();
}

}  // namespace

void publish_peer_addresses() {
  const int port = open_probe_port();
  const std::vector<std::string> all = all_gather_strings(host_name() + " " + std::to_string(port));
  peer_addresses.clear();
  std::map<std::string, std::string> resolved;  // one lookup per host, not per rank
  for (const std::string& entry : all) {
    PeerAddress peer;
    std::istringstream(entry) >> peer.host >> peer.port;
    auto found = resolved.find(peer.host);
    if (found == resolved.end()) found = resolved.emplace(peer.host, resolve_ipv4(peer.host)).first;
    peer.ip = found->second;
    peer_addresses.push_back(peer);
  }
  if (world_rank() == 0) spdlog::info("ranks run on {}", describe_placement(peer_hosts()));
  constexpr double kProbeSeconds = 3;
  set_timeout_witness({[] { return peer_addresses[static_cast<size_t>(world_rank())].host; },
                       [] { return summarize_probes(probe_peers(kProbeSeconds), kProbeSeconds); }});
}

std::vector<std::string> peer_hosts() {
  std::vector<std::string> hosts;
  for (const PeerAddress& peer : peer_addresses) hosts.push_back(peer.host);
  return hosts;
}

std::string describe_placement(const std::vector<std::string>& hosts) {
  std::ostringstream out;
  for (size_t first = 0; first < hosts.size();) {
    size_t last = first;
    while (last + 1 < hosts.size() && hosts[last + 1] == hosts[first]) ++last;
    if (first > 0) out << ", ";
    out << hosts[first] << " (rank" << (last > first ? "s " : " ") << first;
    if (last > first) out << "-" << last;
    out << ")";
    first = last + 1;
  }
  return out.str();
}

std::vector<PeerProbe> probe_peers(double seconds) {
  const int self = world_rank();
  std::vector<PeerProbe> probes;
  probes.reserve(peer_addresses.size());
  for (size_t r = 0; r < peer_addresses.size(); ++r) {
    if (static_cast<int>(r) == self) continue;
    const PeerAddress& peer = peer_addresses[r];
    PeerProbe probe;
    probe.rank = static_cast<int>(r);
    probe.host = peer.host;
    probe.address = peer.ip + ":" + std::to_string(peer.port);
    probe.outcome = PeerProbe::Outcome::kUnresolved;
    probes.push_back(probe);
  }
  std::vector<pollfd> pending;
  std::vector<PeerProbe*> waiting;
  for (PeerProbe& probe : probes) {
    const PeerAddress& peer = peer_addresses[static_cast<size_t>(probe.rank)];
    if (peer.ip.empty() || peer.port == 0) continue;
    const int fd = start_connection(peer, probe.outcome);
    if (fd < 0) continue;
    pending.push_back(pollfd{fd, POLLOUT, 0});
    waiting.push_back(&probe);
  }
  await_connections(pending, waiting, seconds);
  return probes;
}

std::string summarize_probes(const std::vector<PeerProbe>& probes, double seconds) {
  std::ostringstream out;
  int silent = 0, listed = 0;
  for (const PeerProbe& probe : probes) {
    if (probe.outcome == PeerProbe::Outcome::kAnswers) continue;
    ++silent;
    if (listed == 8) continue;  // enough to locate the failure in a large job
    out << (listed++ > 0 ? "; " : "") << describe_probe(probe, seconds);
  }
  if (silent > listed) out << "; and " << silent - listed << " more rank(s) that do not answer";
  if (probes.empty()) return "no other rank to probe";
  if (silent == 0) return "every other rank's process answers a probe, so one of them is stuck rather than gone";
  return out.str();
}

}  // namespace mpibert
