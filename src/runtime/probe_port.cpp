#include "mpibert/runtime/probe_port.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "mpibert/core/sha256.hpp"
#include "mpibert/core/time.hpp"

namespace mpibert {
namespace {

// The handshake (probe_port.hpp), each message of a fixed length.
constexpr char kMagic[] = "mbprobe2";  // opens a hello: anything else is another protocol, closed without a byte
constexpr size_t kMagicBytes = sizeof kMagic - 1, kNonceBytes = 32, kMacBytes = 32;
constexpr size_t kHelloBytes = kMagicBytes + kNonceBytes;
// How long a connection may take to complete the handshake: a prober sends each message as soon
// as it can.
constexpr auto kHandshakeGrace = std::chrono::seconds(2);
// Connections in the handshake at once; a newer one evicts the oldest, so idle strangers cannot
// crowd out a probe.
constexpr size_t kMaxWaiting = 64;

// Random bytes from the kernel; empty if it has none to give.
std::string random_bytes(size_t count) {
  std::string bytes(count, '\0');
  for (size_t filled = 0; filled < count;) {
    const ssize_t n = getrandom(&bytes[filled], count - filled, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return "";
    filled += static_cast<size_t>(n);
  }
  return bytes;
}

// What each side's MAC covers: which side it is (so neither side's MAC can be sent back as the
// other's), the rank probed (so one rank's answer cannot be relayed for another's port) and both
// nonces (so no exchange can be replayed).
std::string handshake_mac(const std::string& token, const char* side, int rank, const std::string& prober_nonce,
                          const std::string& listener_nonce) {
  std::string message = std::string("mpibert probe ") + side;
  for (int shift = 24; shift >= 0; shift -= 8) message += static_cast<char>((static_cast<uint32_t>(rank) >> shift) & 0xff);
  return hmac_sha256(token, message + prober_nonce + listener_nonce);
}

// A fresh connection's send buffer takes a whole message at once.
bool send_message(int fd, const std::string& bytes) {
  return send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT) == static_cast<ssize_t>(bytes.size());
}

}  // namespace

std::string new_probe_token() {
  std::string token = random_bytes(kProbeTokenBytes);
  if (token.empty()) throw std::runtime_error(std::string("probe port: getrandom failed: ") + std::strerror(errno));
  return token;
}

// One address's port, answering the job's token from a thread of its own.
class ProbePort::Listener {
 public:
  Listener(const std::string& ip, std::string token, int rank) : token_(std::move(token)), rank_(rank) {
    endpoint_.ip = ip;
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
    endpoint_.port = ntohs(address.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;
  ~Listener() {
    if (thread_.joinable()) {
      stopping_ = true;
      wake();
      thread_.join();
    }
    if (listen_fd_ >= 0) close(listen_fd_);
    if (wake_fd_ >= 0) close(wake_fd_);
  }
  const ProbeEndpoint& endpoint() const { return endpoint_; }  // port 0: not listening (error() says why)
  int error() const { return error_; }
  void fail_next_poll(int error) {
    injected_error_ = error;
    wake();
  }

 private:
  struct Waiting {
    int fd;
    std::string received;                      // of the message awaited
    std::string prober_nonce, listener_nonce;  // no listener nonce yet: the hello is awaited
    Clock::time_point deadline;
  };

  void wake() {
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t written = write(wake_fd_, &one, sizeof one);  // an eventfd takes it
  }

  // What woke the thread: a request to stop (true), or an injected error (then in errno).
  bool woken_to_stop() {
    uint64_t count = 0;
    [[maybe_unused]] const ssize_t n = read(wake_fd_, &count, sizeof count);
    if (stopping_) return true;
    errno = injected_error_.exchange(0);
    return false;
  }

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
      if (fds[0].revents != 0 && (woken_to_stop() || errno != 0)) break;
      // Reads what each connection sent; those done (answered, wrong, closed, late) are dropped.
      const auto after = Clock::now();
      for (size_t i = waiting.size(); i-- > 0;) {
        Waiting& w = waiting[i];
        if ((fds[i + 2].revents != 0 && serve_readable(w)) || after >= w.deadline) {
          close(w.fd);
          waiting.erase(waiting.begin() + static_cast<std::ptrdiff_t>(i));
        }
      }
      if (fds[1].revents != 0) accept_all(waiting);
    }
    for (const Waiting& w : waiting) close(w.fd);
  }

  // Reads what `w` sent and replies once a message is complete; true when the connection is done
  // (answered, or dropped: not our protocol, a wrong proof, closed).
  bool serve_readable(Waiting& w) {
    const bool hello = w.listener_nonce.empty();
    const size_t wanted = hello ? kHelloBytes : kMacBytes;
    char buffer[kHelloBytes];
    const ssize_t n = recv(w.fd, buffer, wanted - w.received.size(), 0);
    if (n < 0) return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
    if (n == 0) return true;
    w.received.append(buffer, static_cast<size_t>(n));
    const size_t magic = std::min(w.received.size(), kMagicBytes);
    if (hello && w.received.compare(0, magic, kMagic, magic) != 0) return true;
    if (w.received.size() < wanted) return false;
    if (hello) {
      w.prober_nonce = w.received.substr(kMagicBytes);
      w.listener_nonce = random_bytes(kNonceBytes);
      w.received.clear();
      return w.listener_nonce.empty() || !send_message(w.fd, w.listener_nonce);
    }
    // Only a prober that proved it knows the token is sent the listener's proof.
    if (equal_in_constant_time(w.received, handshake_mac(token_, "prober", rank_, w.prober_nonce, w.listener_nonce))) {
      send_message(w.fd, handshake_mac(token_, "listener", rank_, w.prober_nonce, w.listener_nonce));
    }
    return true;
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
      waiting.push_back(Waiting{fd, {}, {}, {}, Clock::now() + kHandshakeGrace});
    }
  }

  std::string token_;
  int rank_;
  ProbeEndpoint endpoint_;
  int listen_fd_ = -1, wake_fd_ = -1, error_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<int> injected_error_{0};
  std::thread thread_;
};

ProbePort::ProbePort(const std::vector<std::string>& ips, const std::string& token, int rank) {
  for (const std::string& ip : ips) {
    auto listener = std::make_unique<Listener>(ip, token, rank);
    if (listener->endpoint().port == 0) {
      problems_.push_back("cannot listen on " + ip + ": " + std::strerror(listener->error()));
    } else {
      listeners_.push_back(std::move(listener));
    }
  }
}

ProbePort::~ProbePort() = default;

std::vector<ProbeEndpoint> ProbePort::endpoints() const {
  std::vector<ProbeEndpoint> endpoints;
  for (const auto& listener : listeners_) endpoints.push_back(listener->endpoint());
  return endpoints;
}

std::vector<std::string> ProbePort::problems() const { return problems_; }

void ProbePort::fail_next_poll_for_testing(int error) {
  for (const auto& listener : listeners_) listener->fail_next_poll(error);
}

namespace {

// Starts a non-blocking connection; returns the descriptor, or -1 when it already failed (with
// `outcome` set).
int start_connection(const ProbeEndpoint& endpoint, ProbeOutcome& outcome) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(endpoint.port));
  inet_pton(AF_INET, endpoint.ip.c_str(), &address.sin_addr);
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    outcome = ProbeOutcome::kNoAnswer;
    return -1;
  }
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 || errno == EINPROGRESS) return fd;
  outcome = errno == ECONNREFUSED ? ProbeOutcome::kProcessGone : ProbeOutcome::kNoAnswer;
  close(fd);
  return -1;
}

struct Attempt {
  int fd;
  int rank;  // the rank expected to answer
  ProbeOutcome* outcome;
  enum class Stage { kConnecting, kAwaitingNonce, kAwaitingAnswer } stage;
  std::string received, prober_nonce, listener_nonce;
};

// One step of an attempt whose descriptor polled ready; true when its outcome is known.
bool advance(Attempt& attempt, const std::string& token) {
  if (attempt.stage == Attempt::Stage::kConnecting) {
    int error = 0;
    socklen_t length = sizeof error;
    getsockopt(attempt.fd, SOL_SOCKET, SO_ERROR, &error, &length);
    if (error != 0) {
      *attempt.outcome = error == ECONNREFUSED ? ProbeOutcome::kProcessGone : ProbeOutcome::kNoAnswer;
      return true;
    }
    attempt.prober_nonce = random_bytes(kNonceBytes);
    attempt.stage = Attempt::Stage::kAwaitingNonce;
    *attempt.outcome = ProbeOutcome::kNoReply;  // unless the handshake completes
    return attempt.prober_nonce.empty() || !send_message(attempt.fd, kMagic + attempt.prober_nonce);
  }
  char buffer[kNonceBytes];
  static_assert(kNonceBytes == kMacBytes, "the listener's two messages have one length");
  const ssize_t n = recv(attempt.fd, buffer, kNonceBytes - attempt.received.size(), 0);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return false;
  if (n <= 0) {
    // Closed: between messages, as our listener closes a connection; in the middle of one, as
    // it never does.
    if (!attempt.received.empty()) *attempt.outcome = ProbeOutcome::kImpostor;
    return true;
  }
  attempt.received.append(buffer, static_cast<size_t>(n));
  if (attempt.received.size() < kNonceBytes) return false;
  if (attempt.stage == Attempt::Stage::kAwaitingNonce) {
    attempt.listener_nonce = std::move(attempt.received);
    attempt.received.clear();
    attempt.stage = Attempt::Stage::kAwaitingAnswer;
    return !send_message(attempt.fd, handshake_mac(token, "prober", attempt.rank, attempt.prober_nonce, attempt.listener_nonce));
  }
  const std::string expected = handshake_mac(token, "listener", attempt.rank, attempt.prober_nonce, attempt.listener_nonce);
  *attempt.outcome = equal_in_constant_time(attempt.received, expected) ? ProbeOutcome::kAnswers : ProbeOutcome::kImpostor;
  return true;
}

// Runs the attempts until each has an outcome or `seconds` have passed: those still connecting
// then did not answer, those connected did not reply.
void await_attempts(std::vector<Attempt>& attempts, const std::string& token, double seconds) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  std::vector<pollfd> fds;
  while (!attempts.empty()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) break;
    fds.clear();
    for (const Attempt& a : attempts) {
      fds.push_back(pollfd{a.fd, static_cast<short>(a.stage == Attempt::Stage::kConnecting ? POLLOUT : POLLIN), 0});
    }
    if (poll(fds.data(), fds.size(), static_cast<int>(left.count())) < 0 && errno != EINTR) break;
    for (size_t i = attempts.size(); i-- > 0;) {
      if (fds[i].revents == 0 || !advance(attempts[i], token)) continue;
      close(attempts[i].fd);
      attempts.erase(attempts.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }
  for (const Attempt& a : attempts) {
    *a.outcome = a.stage == Attempt::Stage::kConnecting ? ProbeOutcome::kNoAnswer : ProbeOutcome::kNoReply;
    close(a.fd);
  }
}

}  // namespace

std::vector<ProbeOutcome> probe_ports(const std::vector<ProbeTarget>& targets, const std::string& token, double seconds) {
  std::vector<ProbeOutcome> outcomes(targets.size(), ProbeOutcome::kUnresolved);
  std::vector<Attempt> attempts;
  for (size_t i = 0; i < targets.size(); ++i) {
    if (targets[i].endpoint.ip.empty() || targets[i].endpoint.port == 0) continue;
    const int fd = start_connection(targets[i].endpoint, outcomes[i]);
    if (fd >= 0) attempts.push_back(Attempt{fd, targets[i].rank, &outcomes[i], Attempt::Stage::kConnecting, {}, {}, {}});
  }
  await_attempts(attempts, token, seconds);
  return outcomes;
}

}  // namespace mpibert
