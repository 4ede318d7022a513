#include "mpibert/runtime/peers.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <memory>
#include <sstream>

#include "mpibert/core/process.hpp"
#include "mpibert/runtime/host_collectives.hpp"
#include "mpibert/runtime/probe_port.hpp"

namespace mpibert {
namespace {

struct PeerAddress {
  std::string host;
  std::string ip;  // IPv4 its probe port listens on; empty when that rank opened none
  int port = 0;
};

std::vector<PeerAddress> peer_addresses;
std::string job_token;

std::unique_ptr<ProbePort> listener;

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

// The local address the kernel would send from towards `ip`: a UDP socket's connect picks the
// route and source address without sending anything.
std::string local_address_towards(const std::string& ip) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(9);  // any port: nothing is sent
  if (inet_pton(AF_INET, ip.c_str(), &address.sin_addr) != 1) return "";
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "";
  socklen_t length = sizeof address;
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0;
  close(fd);
  if (!ok) return "";
  char text[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &address.sin_addr, text, sizeof text);
  return text;
}

// Where this rank's probe port listens: loopback when every rank runs on this host; else this
// host's address towards the first other host (in rank order) whose name resolves to an address
// that is not loopback here. Empty, with `why` set, when there is none.
std::string probe_listen_address(const std::vector<std::string>& hosts, const std::string& own, std::string& why) {
  std::vector<std::string> others;
  for (const std::string& host : hosts) {
    if (host != own && std::find(others.begin(), others.end(), host) == others.end()) others.push_back(host);
  }
  if (others.empty()) return "127.0.0.1";
  std::ostringstream tried;
  for (const std::string& host : others) {
    const std::string ip = resolve_ipv4(host);
    const std::string local = ip.empty() ? "" : local_address_towards(ip);
    if (!local.empty() && local.rfind("127.", 0) != 0) return local;
    tried << (tried.tellp() > 0 ? ", " : "") << host
          << (ip.empty()      ? " (does not resolve)"
              : local.empty() ? " (" + ip + ": no route)"
                              : " (" + ip + ": loopback here)");
  }
  why = "no other rank's host is reachable through a network address from here: " + tried.str();
  return "";
}

std::string describe_probe(const PeerProbe& probe, double seconds) {
  std::ostringstream out;
  out << "rank " << probe.rank << " on " << probe.host;
  switch (probe.outcome) {
    case PeerProbe::Outcome::kAnswers: out << " answers"; break;
    case PeerProbe::Outcome::kProcessGone:
      out << " is gone (" << probe.address << " refused: its host is up, the process is not)";
      break;
    case PeerProbe::Outcome::kNoReply:
      out << " does not reply (" << probe.address << " accepted but did not complete the job's handshake within " << seconds
          << " s: the process is stopped, or another program holds its port)";
      break;
    case PeerProbe::Outcome::kImpostor:
      out << " is gone (" << probe.address << " answered without the job's token: another program holds its port)";
      break;
    case PeerProbe::Outcome::kNoAnswer:
      out << " does not answer (nothing from " << probe.address << " within " << seconds
          << " s: its host or the link to it is down)";
      break;
    case PeerProbe::Outcome::kUnresolved: out << " could not be probed (it opened no probe port at setup)"; break;
  }
  return out.str();
}

}  // namespace

void publish_peer_addresses() {
  const int rank = world_rank();
  const std::vector<std::string> hosts = all_gather_strings(host_name());
  job_token = broadcast_string(rank == 0 ? new_probe_token() : std::string(), 0, "the job's token for peer probes");
  listener.reset();  // a second call replaces the port
  std::string why;
  const std::string ip = probe_listen_address(hosts, hosts[static_cast<size_t>(rank)], why);
  int port = 0;
  if (!ip.empty()) {
    listener = std::make_unique<ProbePort>(std::vector<std::string>{ip}, job_token, rank);
    if (listener->endpoints().empty()) {
      why = listener->problems().front();
    } else {
      port = listener->endpoints().front().port;
    }
  }
  // The job runs on without it: a timeout report then says this rank could not be probed.
  if (port == 0) spdlog::warn("rank {} ({}): no probe port for timeout reports: {}", rank, hosts[static_cast<size_t>(rank)], why);
  const std::vector<std::string> all = all_gather_strings(port == 0 ? std::string() : ip + " " + std::to_string(port));
  peer_addresses.clear();
  for (size_t r = 0; r < all.size(); ++r) {
    PeerAddress peer;
    peer.host = hosts[r];
    std::istringstream(all[r]) >> peer.ip >> peer.port;
    peer_addresses.push_back(peer);
  }
  if (rank == 0) spdlog::info("ranks run on {}", describe_placement(peer_hosts()));
  if (rank == 0) {
    std::ostringstream addresses;
    for (const std::string& address : peer_probe_addresses()) addresses << (addresses.tellp() > 0 ? ", " : "") << address;
    spdlog::debug("probe ports, in rank order: {}", addresses.str());
  }
  constexpr double kProbeSeconds = 3;
  set_timeout_witness({[] { return peer_addresses[static_cast<size_t>(world_rank())].host; },
                       [] { return summarize_probes(probe_peers(kProbeSeconds), kProbeSeconds); }});
}

std::vector<std::string> peer_hosts() {
  std::vector<std::string> hosts;
  for (const PeerAddress& peer : peer_addresses) hosts.push_back(peer.host);
  return hosts;
}

std::vector<std::string> peer_probe_addresses() {
  std::vector<std::string> addresses;
  for (const PeerAddress& peer : peer_addresses) {
    addresses.push_back(peer.port == 0 ? std::string() : peer.ip + ":" + std::to_string(peer.port));
  }
  return addresses;
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
  std::vector<ProbeTarget> targets;
  for (const PeerProbe& probe : probes) {
    const PeerAddress& peer = peer_addresses[static_cast<size_t>(probe.rank)];
    targets.push_back(ProbeTarget{ProbeEndpoint{peer.ip, peer.port}, probe.rank});
  }
  const std::vector<ProbeOutcome> outcomes = probe_ports(targets, job_token, seconds);
  for (size_t i = 0; i < probes.size(); ++i) probes[i].outcome = outcomes[i];
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
