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

// Where a rank's probe port listens towards one host: on the address its own host sends from
// towards that host.
struct Route {
  std::string towards;  // a host name
  ProbeEndpoint endpoint;
};

struct PeerAddress {
  std::string host;
  std::vector<Route> routes;  // empty when that rank opened no port
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

// Where this rank's probe port listens: on loopback when every rank runs on this host; else, for
// each other host whose name resolves to an address that is not loopback here, on this host's
// source address towards it (the ports are not known yet). Empty, with `why` set, when no other
// host is reachable so.
std::vector<Route> probe_routes(const std::vector<std::string>& hosts, const std::string& own, std::string& why) {
  std::vector<std::string> others;
  for (const std::string& host : hosts) {
    if (host != own && std::find(others.begin(), others.end(), host) == others.end()) others.push_back(host);
  }
  if (others.empty()) return {Route{own, ProbeEndpoint{"127.0.0.1", 0}}};
  std::vector<Route> routes;
  std::ostringstream tried;
  for (const std::string& host : others) {
    const std::string ip = resolve_ipv4(host);
    const std::string local = ip.empty() ? "" : local_address_towards(ip);
    if (!local.empty() && local.rfind("127.", 0) != 0) {
      routes.push_back(Route{host, ProbeEndpoint{local, 0}});
      continue;
    }
    tried << (tried.tellp() > 0 ? ", " : "") << host
          << (ip.empty()      ? " (does not resolve)"
              : local.empty() ? " (" + ip + ": no route)"
                              : " (" + ip + ": loopback here)");
  }
  if (routes.empty()) why = "no other rank's host is reachable through a network address from here: " + tried.str();
  return routes;
}

// Opens the probe port on the routes' addresses (each distinct one once) and gives each route its
// port; the routes whose address it could not listen on are dropped, and `why` says why.
void open_probe_port(std::vector<Route>& routes, int rank, std::string& why) {
  std::vector<std::string> ips;
  for (const Route& route : routes) {
    if (std::find(ips.begin(), ips.end(), route.endpoint.ip) == ips.end()) ips.push_back(route.endpoint.ip);
  }
  listener = std::make_unique<ProbePort>(ips, job_token, rank);
  for (Route& route : routes) {
    for (const ProbeEndpoint& endpoint : listener->endpoints()) {
      if (endpoint.ip == route.endpoint.ip) route.endpoint.port = endpoint.port;
    }
  }
  routes.erase(std::remove_if(routes.begin(), routes.end(), [](const Route& route) { return route.endpoint.port == 0; }),
               routes.end());
  for (const std::string& problem : listener->problems()) why += (why.empty() ? "" : "; ") + problem;
}

// One line per route: "HOST IP PORT".
std::string format_routes(const std::vector<Route>& routes) {
  std::ostringstream out;
  for (const Route& route : routes) out << route.towards << ' ' << route.endpoint.ip << ' ' << route.endpoint.port << '\n';
  return out.str();
}

std::vector<Route> parse_routes(const std::string& text) {
  std::vector<Route> routes;
  std::istringstream in(text);
  Route route;
  while (in >> route.towards >> route.endpoint.ip >> route.endpoint.port) routes.push_back(route);
  return routes;
}

// The address of `peer`'s port that this rank probes: the one it listens on towards this rank's
// host, else (this rank's host is its own) its first. Null when it has none.
const ProbeEndpoint* endpoint_for(const PeerAddress& peer) {
  if (peer.routes.empty()) return nullptr;
  const std::string& own_host = peer_addresses[static_cast<size_t>(world_rank())].host;
  for (const Route& route : peer.routes) {
    if (route.towards == own_host) return &route.endpoint;
  }
  return &peer.routes.front().endpoint;
}

std::string text_of(const ProbeEndpoint& endpoint) { return endpoint.ip + ":" + std::to_string(endpoint.port); }

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
  const std::string& own_host = hosts[static_cast<size_t>(rank)];
  job_token = broadcast_string(rank == 0 ? new_probe_token() : std::string(), 0, "the job's token for peer probes");
  listener.reset();  // a second call replaces the port
  std::string why;
  std::vector<Route> routes = probe_routes(hosts, own_host, why);
  if (!routes.empty()) open_probe_port(routes, rank, why);
  // The job runs on without it: a timeout report then says this rank could not be probed.
  if (routes.empty()) {
    spdlog::warn("rank {} ({}): no probe port for timeout reports: {}", rank, own_host, why);
  } else if (!why.empty()) {
    spdlog::warn("rank {} ({}): a probe port on some of its addresses only: {}", rank, own_host, why);
  }
  const std::vector<std::string> all = all_gather_strings(format_routes(routes));
  peer_addresses.clear();
  for (size_t r = 0; r < all.size(); ++r) peer_addresses.push_back(PeerAddress{hosts[r], parse_routes(all[r])});
  if (rank == 0) spdlog::info("ranks run on {}", describe_placement(peer_hosts()));
  if (rank == 0) {
    std::ostringstream ports;
    for (const PeerAddress& peer : peer_addresses) {
      ports << (ports.tellp() > 0 ? "; " : "") << peer.host << ":";
      for (const Route& route : peer.routes) ports << " " << text_of(route.endpoint) << " towards " << route.towards;
    }
    spdlog::debug("probe ports, in rank order: {}", ports.str());
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
    const ProbeEndpoint* endpoint = endpoint_for(peer);
    addresses.push_back(endpoint == nullptr ? std::string() : text_of(*endpoint));
  }
  return addresses;
}

std::vector<std::string> own_probe_addresses() {
  std::vector<std::string> addresses;
  if (listener != nullptr) {
    for (const ProbeEndpoint& endpoint : listener->endpoints()) addresses.push_back(text_of(endpoint));
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
  std::vector<ProbeTarget> targets;
  for (size_t r = 0; r < peer_addresses.size(); ++r) {
    if (static_cast<int>(r) == self) continue;
    const ProbeEndpoint* endpoint = endpoint_for(peer_addresses[r]);
    PeerProbe probe;
    probe.rank = static_cast<int>(r);
    probe.host = peer_addresses[r].host;
    probe.address = endpoint == nullptr ? std::string() : text_of(*endpoint);
    probes.push_back(probe);
    targets.push_back(ProbeTarget{endpoint == nullptr ? ProbeEndpoint{} : *endpoint, probe.rank});
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
