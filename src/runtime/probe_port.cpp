#include "mpibert/runtime/probe_port.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

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
// Connections in the handshake at once (file descriptors held), and how many are accepted before
// those held are read again.
constexpr size_t kMaxPending = 128, kAcceptBatch = 16;
// The pauses before a port is reopened after an error.
constexpr std::chrono::milliseconds kFirstPause(100), kLongestPause(10000);

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

// One address's port, serving the handshake from a thread of its own.
class ProbePort::Listener {
 public:
  Listener(const std::string& ip, std::string token, int rank) : token_(std::move(token)), rank_(rank) {
    endpoint_.ip = ip;
    wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    error_ = wake_fd_ < 0 ? errno : open_socket();
    if (error_ == 0) thread_ = std::thread([this] { run(); });
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
  struct Pending {
    int fd;
    std::string received;                      // of the message awaited
    std::string prober_nonce, listener_nonce;  // no listener nonce yet: the hello is awaited
    Clock::time_point deadline;
    Clock::time_point heard{};  // when it last sent bytes (never: the clock's epoch)
  };

  // Listens on endpoint_ (its port, once it has one; any port before): 0, or the errno.
  int open_socket() {
    listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (listen_fd_ < 0) return errno;
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(endpoint_.port));
    if (inet_pton(AF_INET, endpoint_.ip.c_str(), &address.sin_addr) != 1) return EINVAL;
    // The port's connections closed by this side wait in TIME_WAIT: they must not keep a reopened
    // port from binding (a port still listening is never shared).
    const int on = 1;
    setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    socklen_t length = sizeof address;
    if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 || listen(listen_fd_, SOMAXCONN) != 0 ||
        getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
      return errno;
    }
    // Set by the first opening, before the thread starts; a reopening binds that same port.
    if (endpoint_.port == 0) endpoint_.port = ntohs(address.sin_port);
    return 0;
  }

  // The thread: serves the port until asked to stop. An error it cannot serve past (a failed poll,
  // a broken listening socket) is logged, and the port reopened on the same address and port after
  // a pause (100 ms, doubling up to 10 s while errors follow each other), so that it never accepts
  // connections that no one answers. Probes that arrive meanwhile wait in the queue, which is then
  // dropped (their probers connect again), and are refused for the moment between close and bind.
  void run() {
    auto pause = kFirstPause;
    for (;;) {
      const auto started = Clock::now();
      const std::string failure = serve();
      while (!pending_.empty()) drop(pending_.size() - 1);
      if (failure.empty()) return;
      spdlog::error("rank {}'s probe port {}:{}: {}; reopening it", rank_, endpoint_.ip, endpoint_.port, failure);
      if (Clock::now() - started > std::chrono::minutes(1)) pause = kFirstPause;
      for (int error = -1; error != 0;) {
        if (wait_for_stop(pause)) return;
        pause = std::min(pause * 2, kLongestPause);
        close(listen_fd_);
        error = open_socket();
        if (error != 0) {
          spdlog::error("rank {}'s probe port {}:{}: cannot reopen it: {}", rank_, endpoint_.ip, endpoint_.port,
                        std::strerror(error));
        }
      }
      spdlog::warn("rank {}'s probe port {}:{} reopened", rank_, endpoint_.ip, endpoint_.port);
    }
  }

  // Waits `pause`; true when asked to stop meanwhile.
  bool wait_for_stop(std::chrono::milliseconds pause) {
    pollfd wake{wake_fd_, POLLIN, 0};
    return poll(&wake, 1, static_cast<int>(pause.count())) > 0 && wake_reason() < 0;
  }

  void wake() {
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t written = write(wake_fd_, &one, sizeof one);  // an eventfd takes it
  }

  // What woke the thread: -1 a request to stop, else an injected error (0: none).
  int wake_reason() {
    uint64_t count = 0;
    [[maybe_unused]] const ssize_t n = read(wake_fd_, &count, sizeof count);
    return stopping_ ? -1 : injected_error_.exchange(0);
  }

  // Serves connections until asked to stop (returns "") or until an error it cannot serve past
  // (returns what failed).
  std::string serve() {
    std::vector<pollfd> fds;
    for (;;) {
      fds.assign({pollfd{wake_fd_, POLLIN, 0}, pollfd{listen_fd_, POLLIN, 0}});
      for (const Pending& p : pending_) fds.push_back(pollfd{p.fd, POLLIN, 0});
      int error = poll(fds.data(), fds.size(), next_deadline_ms()) < 0 ? errno : 0;
      if (error == EINTR) continue;
      if (error == 0 && fds[0].revents != 0) error = wake_reason();
      if (error < 0) return "";
      if (error > 0) return std::string("poll failed: ") + std::strerror(error);
      // Serves what each connection sent; those done (answered, wrong, closed, late) are dropped.
      const auto now = Clock::now();
      for (size_t i = pending_.size(); i-- > 0;) {
        if ((fds[i + 2].revents != 0 && serve_readable(pending_[i], now)) || now >= pending_[i].deadline) drop(i);
      }
      if (fds[1].revents == 0) continue;
      const std::string failure = accept_some();
      if (!failure.empty()) return failure;
    }
  }

  int next_deadline_ms() const {
    if (pending_.empty()) return -1;
    auto first = pending_.front().deadline;
    for (const Pending& p : pending_) first = std::min(first, p.deadline);
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(first - Clock::now()) + std::chrono::milliseconds(1);
    return static_cast<int>(std::max<int64_t>(left.count(), 0));
  }

  void drop(size_t i) {
    close(pending_[i].fd);
    pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
  }

  // The connection that makes room for a newer one: the oldest that has sent nothing, else the one
  // silent longest. A prober sends each message at once and is read at once when it arrives with
  // its connection, so only a crowd of more than kMaxPending connections that all send something
  // within one of its round trips pushes it out (and it then tries again).
  size_t victim() const {
    size_t chosen = 0;
    for (size_t i = 0; i < pending_.size(); ++i) {
      if (pending_[i].heard == Clock::time_point{}) return i;  // in the order accepted
      if (pending_[i].heard < pending_[chosen].heard) chosen = i;
    }
    return chosen;
  }

  // Reads what `p` sent and replies once a message is complete; true when the connection is done
  // (answered, or dropped: not our protocol, a wrong proof, closed).
  bool serve_readable(Pending& p, Clock::time_point now) {
    const bool hello = p.listener_nonce.empty();
    const size_t wanted = hello ? kHelloBytes : kMacBytes;
    char buffer[kHelloBytes];
    const ssize_t n = recv(p.fd, buffer, wanted - p.received.size(), 0);
    if (n < 0) return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
    if (n == 0) return true;
    p.heard = now;
    p.received.append(buffer, static_cast<size_t>(n));
    const size_t magic = std::min(p.received.size(), kMagicBytes);
    if (hello && p.received.compare(0, magic, kMagic, magic) != 0) return true;
    if (p.received.size() < wanted) return false;
    if (hello) {
      p.prober_nonce = p.received.substr(kMagicBytes);
      p.listener_nonce = random_bytes(kNonceBytes);
      p.received.clear();
      return p.listener_nonce.empty() || !send_message(p.fd, p.listener_nonce);
    }
    // Only a prober that proved it knows the token is sent the listener's proof.
    if (equal_in_constant_time(p.received, handshake_mac(token_, "prober", rank_, p.prober_nonce, p.listener_nonce))) {
      send_message(p.fd, handshake_mac(token_, "listener", rank_, p.prober_nonce, p.listener_nonce));
    }
    return true;
  }

  // Accepts up to kAcceptBatch queued connections, reading each at once (a prober's hello is often
  // there already); beyond kMaxPending, the victim makes room. Returns what failed when the
  // listening socket cannot accept any more.
  std::string accept_some() {
    for (size_t accepted = 0; accepted < kAcceptBatch; ++accepted) {
      const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        const int error = errno;
        if (error == EAGAIN || error == EWOULDBLOCK) return "";
        if (error == EBADF || error == ENOTSOCK || error == EINVAL || error == EOPNOTSUPP || error == EFAULT) {
          return std::string("accept failed: ") + std::strerror(error);
        }
        if (error != EMFILE && error != ENFILE && error != ENOBUFS && error != ENOMEM) continue;  // that one connection failed
        // Out of descriptors or memory: a held connection makes room, or, with none, a pause
        // keeps the queued connection from spinning this loop.
        if (!pending_.empty()) {
          drop(victim());
        } else if (wait_for_stop(std::chrono::milliseconds(100))) {
          wake();  // the request to stop, again, for serve's next poll
        }
        return "";
      }
      const auto now = Clock::now();
      pending_.push_back(Pending{fd, {}, {}, {}, now + kHandshakeGrace});
      if (serve_readable(pending_.back(), now)) {
        drop(pending_.size() - 1);
      } else if (pending_.size() > kMaxPending) {
        drop(victim());
      }
    }
    return "";
  }

  std::string token_;
  int rank_;
  ProbeEndpoint endpoint_;
  int listen_fd_ = -1, wake_fd_ = -1, error_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<int> injected_error_{0};
  std::vector<Pending> pending_;  // the thread's
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

// One probe: a connection through the handshake, and another while time is left when the
// listener closes one between messages (as it does when a crowd pushes the connection out).
struct Attempt {
  const ProbeTarget* target;
  ProbeOutcome* outcome;
  int fd = -1;  // -1: connecting again at retry_at
  enum class Stage { kConnecting, kAwaitingNonce, kAwaitingAnswer } stage = Stage::kConnecting;
  bool accepted = false;  // a connection of this probe was accepted
  bool done = false;
  std::string received, prober_nonce, listener_nonce;
  Clock::time_point retry_at;
};

constexpr auto kRetryPause = std::chrono::milliseconds(50);

// Starts a connection; false when it failed at once (the outcome set).
bool connect_attempt(Attempt& attempt) {
  attempt.stage = Attempt::Stage::kConnecting;
  attempt.received.clear();
  attempt.fd = start_connection(attempt.target->endpoint, *attempt.outcome);
  return attempt.fd >= 0;
}

enum class Step { kGoesOn, kDone, kTryAgain };

// One step of an attempt whose descriptor polled ready.
Step advance(Attempt& attempt, const std::string& token) {
  const int rank = attempt.target->rank;
  if (attempt.stage == Attempt::Stage::kConnecting) {
    int error = 0;
    socklen_t length = sizeof error;
    getsockopt(attempt.fd, SOL_SOCKET, SO_ERROR, &error, &length);
    if (error != 0) {
      *attempt.outcome = error == ECONNREFUSED ? ProbeOutcome::kProcessGone : ProbeOutcome::kNoAnswer;
      return Step::kDone;
    }
    attempt.accepted = true;
    *attempt.outcome = ProbeOutcome::kNoReply;  // unless a handshake completes
    attempt.prober_nonce = random_bytes(kNonceBytes);
    attempt.stage = Attempt::Stage::kAwaitingNonce;
    return !attempt.prober_nonce.empty() && send_message(attempt.fd, kMagic + attempt.prober_nonce) ? Step::kGoesOn : Step::kDone;
  }
  char buffer[kNonceBytes];
  static_assert(kNonceBytes == kMacBytes, "the listener's two messages have one length");
  const ssize_t n = recv(attempt.fd, buffer, kNonceBytes - attempt.received.size(), 0);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return Step::kGoesOn;
  if (n <= 0) {
    // Closed between messages, as our listener closes a connection; in the middle of one, as it
    // never does.
    if (attempt.received.empty()) return Step::kTryAgain;
    *attempt.outcome = ProbeOutcome::kImpostor;
    return Step::kDone;
  }
  attempt.received.append(buffer, static_cast<size_t>(n));
  if (attempt.received.size() < kNonceBytes) return Step::kGoesOn;
  if (attempt.stage == Attempt::Stage::kAwaitingNonce) {
    attempt.listener_nonce = std::move(attempt.received);
    attempt.received.clear();
    attempt.stage = Attempt::Stage::kAwaitingAnswer;
    const std::string proof = handshake_mac(token, "prober", rank, attempt.prober_nonce, attempt.listener_nonce);
    return send_message(attempt.fd, proof) ? Step::kGoesOn : Step::kDone;
  }
  const std::string expected = handshake_mac(token, "listener", rank, attempt.prober_nonce, attempt.listener_nonce);
  *attempt.outcome = equal_in_constant_time(attempt.received, expected) ? ProbeOutcome::kAnswers : ProbeOutcome::kImpostor;
  return Step::kDone;
}

void finish(Attempt& attempt) {
  if (attempt.fd >= 0) close(attempt.fd);
  attempt.fd = -1;
  attempt.done = true;
}

// Runs the attempts until each has an outcome or `seconds` have passed: those still connecting
// then did not answer (unless an earlier connection was accepted), the others did not reply.
void await_attempts(std::vector<Attempt>& attempts, const std::string& token, double seconds) {
  const Clock::time_point deadline = Clock::now() +
                                     std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  std::vector<pollfd> fds;
  std::vector<Attempt*> polled;
  for (auto now = Clock::now(); now < deadline; now = Clock::now()) {
    auto wake_at = deadline;
    fds.clear();
    polled.clear();
    for (Attempt& a : attempts) {
      if (!a.done && a.fd < 0 && now >= a.retry_at && !connect_attempt(a)) finish(a);
      if (a.done) continue;
      if (a.fd < 0) {
        wake_at = std::min(wake_at, a.retry_at);
      } else {
        fds.push_back(pollfd{a.fd, static_cast<short>(a.stage == Attempt::Stage::kConnecting ? POLLOUT : POLLIN), 0});
        polled.push_back(&a);
      }
    }
    if (fds.empty() && wake_at == deadline) break;  // every outcome known
    const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(wake_at - now) + std::chrono::milliseconds(1);
    if (poll(fds.data(), fds.size(), static_cast<int>(wait.count())) < 0 && errno != EINTR) break;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      Attempt& a = *polled[i];
      const Step step = advance(a, token);
      if (step == Step::kDone) finish(a);
      if (step != Step::kTryAgain) continue;
      close(a.fd);
      a.fd = -1;
      a.retry_at = Clock::now() + kRetryPause;
    }
  }
  for (Attempt& a : attempts) {
    if (a.done) continue;
    if (a.fd >= 0 && a.stage == Attempt::Stage::kConnecting && !a.accepted) *a.outcome = ProbeOutcome::kNoAnswer;
    finish(a);
  }
}

}  // namespace

std::vector<ProbeOutcome> probe_ports(const std::vector<ProbeTarget>& targets, const std::string& token, double seconds) {
  std::vector<ProbeOutcome> outcomes(targets.size(), ProbeOutcome::kUnresolved);
  std::vector<Attempt> attempts;
  for (size_t i = 0; i < targets.size(); ++i) {
    if (targets[i].endpoint.ip.empty() || targets[i].endpoint.port == 0) continue;
    Attempt attempt;
    attempt.target = &targets[i];
    attempt.outcome = &outcomes[i];
    if (connect_attempt(attempt)) attempts.push_back(std::move(attempt));
  }
  await_attempts(attempts, token, seconds);
  return outcomes;
}

}  // namespace mpibert
