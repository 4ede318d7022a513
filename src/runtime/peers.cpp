#include "mpibert/runtime/peers.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "mpibert/core/process.hpp"
#include "mpibert/core/time.hpp"
#include "mpibert/runtime/host_collectives.hpp"

namespace mpibert {
namespace {

constexpr size_t kTokenBytes = 32;
constexpr char kAnswer = '!';  // the listener's whole reply to a connection that presents the token
// How long a connection may take to present the token: a prober sends it as soon as it connects.
constexpr auto kTokenGrace = std::chrono::seconds(2);
// Connections waiting for their token at once; a newer one evicts the oldest, so idle strangers
// cannot crowd out a probe.
constexpr size_t kMaxWaiting = 64;

struct PeerAddress {
  std::string host;
  std::string ip;  // IPv4 its probe port listens on; empty when that rank opened none
  int port = 0;
};

std::vector<PeerAddress> peer_addresses;
std::string job_token;

bool tokens_equal(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char differ = 0;  // compares every byte: the time taken says nothing about the token
  for (size_t i = 0; i < a.size(); ++i) differ |= static_cast<unsigned char>(a[i] ^ b[i]);
  return differ == 0;
}

// The probe port: listening on one address, answering the job's token from a thread of its own
// (so a rank stuck in a collective still answers), until the process ends or a new port replaces
// it.
class ProbeListener {
 public:
  ProbeListener(const std::string& ip, std::string token) : token_(std::move(token)) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (listen_fd_ < 0 || wake_fd_ < 0) {
      error_ = errno;
      return;
    }
    sockaddr_in address{};
    address.sin_family = AF_INET;
    if (inet_pton(AF_INET, ip.c_str(), &address.sin_addr) != 1) {
      error_ = EINVAL;
      return;
    }
    socklen_t length = sizeof address;
    if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 || listen(listen_fd_, SOMAXCONN) != 0 ||
        getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
      error_ = errno;
      return;
    }
    port_ = ntohs(address.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ProbeListener(const ProbeListener&) = delete;
  ProbeListener& operator=(const ProbeListener&) = delete;
  ~ProbeListener() {
    if (thread_.joinable()) {
      const uint64_t one = 1;
      [[maybe_unused]] const ssize_t written = write(wake_fd_, &one, sizeof one);  // an eventfd takes it
      thread_.join();
    }
    if (listen_fd_ >= 0) close(listen_fd_);
    if (wake_fd_ >= 0) close(wake_fd_);
  }
  int port() const { return port_; }  // 0: no port (error() says why)
  int error() const { return error_; }

 private:
  struct Waiting {
    int fd;
    std::string received;
    Clock::time_point deadline;
  };

  void serve() {
    std::vector<Waiting> waiting;
    std::vector<pollfd> fds;
    for (;;) {
      fds.assign({pollfd{wake_fd_, POLLIN, 0}, pollfd{listen_fd_, POLLIN, 0}});
      auto timeout = std::chrono::milliseconds(-1);
      const auto now = Clock::now();
      for (const Waiting& w : waiting) {
        fds.push_back(pollfd{w.fd, POLLIN, 0});
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(w.deadline - now) + std::chrono::milliseconds(1);
        if (timeout.count() < 0 || left < timeout) timeout = std::max(left, std::chrono::milliseconds(0));
      }
      if (poll(fds.data(), fds.size(), static_cast<int>(timeout.count())) < 0 && errno != EINTR) break;
      if (fds[0].revents != 0) break;
      // Reads what each connection sent; those done (answered, wrong, closed, late) are dropped.
      const auto after = Clock::now();
      for (size_t i = waiting.size(); i-- > 0;) {
        Waiting& w = waiting[i];
        bool done = after >= w.deadline;
        if (fds[i + 2].revents != 0) {
          char buffer[kTokenBytes];
          const ssize_t n = recv(w.fd, buffer, kTokenBytes - w.received.size(), 0);
          if (n > 0) w.received.append(buffer, static_cast<size_t>(n));
          if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) done = true;
          if (w.received.size() == kTokenBytes) {
            if (tokens_equal(w.received, token_)) send(w.fd, &kAnswer, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
            done = true;  // a wrong token is closed without a byte
          }
        }
        if (done) {
          close(w.fd);
          waiting.erase(waiting.begin() + static_cast<std::ptrdiff_t>(i));
        }
      }
      if (fds[1].revents != 0) accept_all(waiting);
    }
    for (const Waiting& w : waiting) close(w.fd);
  }

  void accept_all(std::vector<Waiting>& waiting) {
    for (;;) {
      const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        // Out of descriptors (EMFILE and the like): the connections waiting longest make room, or,
        // with none, a pause keeps the queued connection from spinning this loop.
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
          if (!waiting.empty()) {
            close(waiting.front().fd);
            waiting.erase(waiting.begin());
          } else {
            pollfd wake{wake_fd_, POLLIN, 0};
            poll(&wake, 1, 100);
          }
        }
        return;
      }
      if (waiting.size() == kMaxWaiting) {
        close(waiting.front().fd);
        waiting.erase(waiting.begin());
      }
      waiting.push_back(Waiting{fd, {}, Clock::now() + kTokenGrace});
    }
  }

  std::string token_;
  int listen_fd_ = -1, wake_fd_ = -1, port_ = 0, error_ = 0;
  std::thread thread_;
};

std::unique_ptr<ProbeListener> listener;

std::string random_token() {
  std::string token(kTokenBytes, '\0');
  for (size_t filled = 0; filled < token.size();) {
    const ssize_t n = getrandom(&token[filled], token.size() - filled, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw std::runtime_error(std::string("peer probes: getrandom failed: ") + std::strerror(errno));
    filled += static_cast<size_t>(n);
  }
  return token;
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

// Starts a non-blocking connection; returns the descriptor, or -1 when it already failed (with
// `outcome` set).
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
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 || errno == EINPROGRESS) return fd;
  outcome = errno == ECONNREFUSED ? PeerProbe::Outcome::kProcessGone : PeerProbe::Outcome::kNoAnswer;
  close(fd);
  return -1;
}

struct Attempt {
  int fd;
  PeerProbe* probe;
  bool connected;  // then the token is sent and the answer awaited
};

// One step of an attempt whose descriptor polled ready; true when its outcome is known.
bool advance(Attempt& attempt) {
  if (!attempt.connected) {
    int error = 0;
    socklen_t length = sizeof error;
    getsockopt(attempt.fd, SOL_SOCKET, SO_ERROR, &error, &length);
    if (error != 0) {
      attempt.probe->outcome = error == ECONNREFUSED ? PeerProbe::Outcome::kProcessGone : PeerProbe::Outcome::kNoAnswer;
      return true;
    }
    attempt.connected = true;
    // A fresh connection's send buffer takes the token at once.
    if (send(attempt.fd, job_token.data(), job_token.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(job_token.size())) {
      attempt.probe->outcome = PeerProbe::Outcome::kNoReply;
      return true;
    }
    return false;
  }
  char answer = 0;
  const ssize_t n = recv(attempt.fd, &answer, 1, 0);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return false;
  attempt.probe->outcome = n == 1 && answer == kAnswer ? PeerProbe::Outcome::kAnswers : PeerProbe::Outcome::kNoReply;
  return true;
}

// Runs the attempts until each has an outcome or `seconds` have passed: those still connecting
// then did not answer, those connected did not reply.
void await_attempts(std::vector<Attempt>& attempts, double seconds) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  std::vector<pollfd> fds;
  while (!attempts.empty()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) break;
    fds.clear();
    for (const Attempt& a : attempts) fds.push_back(pollfd{a.fd, static_cast<short>(a.connected ? POLLIN : POLLOUT), 0});
    if (poll(fds.data(), fds.size(), static_cast<int>(left.count())) < 0 && errno != EINTR) break;
    for (size_t i = attempts.size(); i-- > 0;) {
      if (fds[i].revents == 0 || !advance(attempts[i])) continue;
      close(attempts[i].fd);
      attempts.erase(attempts.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }
  for (const Attempt& a : attempts) {
    a.probe->outcome = a.connected ? PeerProbe::Outcome::kNoReply : PeerProbe::Outcome::kNoAnswer;
    close(a.fd);
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
    case PeerProbe::Outcome::kNoReply:
      out << " does not reply (" << probe.address << " accepted but did not answer the job's token within " << seconds
          << " s: the process is stopped, or another program holds its port)";
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
  job_token = broadcast_string(rank == 0 ? random_token() : std::string(), 0, "the job's token for peer probes");
  listener.reset();  // a second call replaces the port
  std::string why;
  const std::string ip = probe_listen_address(hosts, hosts[static_cast<size_t>(rank)], why);
  int port = 0;
  if (!ip.empty()) {
    listener = std::make_unique<ProbeListener>(ip, job_token);
    port = listener->port();
    if (port == 0) why = "cannot listen on " + ip + ": " + std::strerror(listener->error());
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
  std::vector<Attempt> attempts;
  for (PeerProbe& probe : probes) {
    const PeerAddress& peer = peer_addresses[static_cast<size_t>(probe.rank)];
    if (peer.ip.empty() || peer.port == 0) continue;
    const int fd = start_connection(peer, probe.outcome);
    if (fd >= 0) attempts.push_back(Attempt{fd, &probe, false});
  }
  await_attempts(attempts, seconds);
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
