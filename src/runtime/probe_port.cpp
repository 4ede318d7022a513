#include "mpibert/runtime/probe_port.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "mpibert/core/sha256.hpp"
#include "mpibert/core/time.hpp"

namespace mpibert {
namespace {

constexpr size_t kTokenBytes = 32;
constexpr char kAnswer = '!';  // the listener's whole reply to a connection that presents the token
// How long a connection may take to present the token: a prober sends it as soon as it connects.
constexpr auto kTokenGrace = std::chrono::seconds(2);
// Connections waiting for their token at once; a newer one evicts the oldest, so idle strangers
// cannot crowd out a probe.
constexpr size_t kMaxWaiting = 64;

}  // namespace

// One address's port, answering the job's token from a thread of its own.
class ProbePort::Listener {
 public:
  Listener(const std::string& ip, std::string token) : token_(std::move(token)) {
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
    std::string received;
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
        bool done = after >= w.deadline;
        if (fds[i + 2].revents != 0) {
          char buffer[kTokenBytes];
          const ssize_t n = recv(w.fd, buffer, kTokenBytes - w.received.size(), 0);
          if (n > 0) w.received.append(buffer, static_cast<size_t>(n));
          if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) done = true;
          if (w.received.size() == kTokenBytes) {
            if (equal_in_constant_time(w.received, token_)) send(w.fd, &kAnswer, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
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
  ProbeEndpoint endpoint_;
  int listen_fd_ = -1, wake_fd_ = -1, error_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<int> injected_error_{0};
  std::thread thread_;
};

ProbePort::ProbePort(const std::vector<std::string>& ips, const std::string& token, int rank) {
  for (const std::string& ip : ips) {
    auto listener = std::make_unique<Listener>(ip, token);
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
  ProbeOutcome* outcome;
  bool connected;  // then the token is sent and the answer awaited
};

// One step of an attempt whose descriptor polled ready; true when its outcome is known.
bool advance(Attempt& attempt, const std::string& token) {
  if (!attempt.connected) {
    int error = 0;
    socklen_t length = sizeof error;
    getsockopt(attempt.fd, SOL_SOCKET, SO_ERROR, &error, &length);
    if (error != 0) {
      *attempt.outcome = error == ECONNREFUSED ? ProbeOutcome::kProcessGone : ProbeOutcome::kNoAnswer;
      return true;
    }
    attempt.connected = true;
    // A fresh connection's send buffer takes the token at once.
    if (send(attempt.fd, token.data(), token.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(token.size())) {
      *attempt.outcome = ProbeOutcome::kNoReply;
      return true;
    }
    return false;
  }
  char answer = 0;
  const ssize_t n = recv(attempt.fd, &answer, 1, 0);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return false;
  *attempt.outcome = n == 1 && answer == kAnswer ? ProbeOutcome::kAnswers : ProbeOutcome::kNoReply;
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
    for (const Attempt& a : attempts) fds.push_back(pollfd{a.fd, static_cast<short>(a.connected ? POLLIN : POLLOUT), 0});
    if (poll(fds.data(), fds.size(), static_cast<int>(left.count())) < 0 && errno != EINTR) break;
    for (size_t i = attempts.size(); i-- > 0;) {
      if (fds[i].revents == 0 || !advance(attempts[i], token)) continue;
      close(attempts[i].fd);
      attempts.erase(attempts.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }
  for (const Attempt& a : attempts) {
    *a.outcome = a.connected ? ProbeOutcome::kNoReply : ProbeOutcome::kNoAnswer;
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
    if (fd >= 0) attempts.push_back(Attempt{fd, &outcomes[i], false});
  }
  await_attempts(attempts, token, seconds);
  return outcomes;
}

}  // namespace mpibert
