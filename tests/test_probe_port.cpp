// The probe port in one process (probe_port.hpp): a port on loopback answers the job's probes and
// nothing else; what a probe reports for a port that refuses, a token that differs, a target with
// no port; and for impostors, programs that took over a dead rank's port, which must neither pass
// for the rank nor learn the token. Across ranks and hosts: test_peers.cpp.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "mpibert/runtime/probe_port.hpp"

namespace mpibert {

// For gtest's messages (found by argument-dependent lookup, so in ProbeOutcome's namespace).
void PrintTo(ProbeOutcome outcome, std::ostream* out) {
  static const char* const kNames[] = {"kAnswers", "kProcessGone", "kNoReply", "kImpostor", "kNoAnswer", "kUnresolved"};
  *out << kNames[static_cast<int>(outcome)];
}

namespace {

const std::string kToken(32, 't');
constexpr double kProbeSeconds = 3;  // what a timeout report waits (peers.cpp)
// Where no answer is expected: a probe that is not answered tries again until its time is up.
constexpr double kShortProbeSeconds = 1;

ProbeOutcome probe_one(const ProbeEndpoint& endpoint, int rank, const std::string& token = kToken,
                       double seconds = kProbeSeconds) {
  return probe_ports({ProbeTarget{endpoint, rank}}, token, seconds).at(0);
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

int listening_socket(ProbeEndpoint& endpoint) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 || listen(fd, 16) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    close(fd);
    return -1;
  }
  endpoint = ProbeEndpoint{"127.0.0.1", ntohs(address.sin_port)};
  return fd;
}

int connect_to(const ProbeEndpoint& endpoint) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(endpoint.port));
  inet_pton(AF_INET, endpoint.ip.c_str(), &address.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Up to `bytes` bytes, fewer when the other end closes or is silent for the socket's timeout.
std::string read_up_to(int fd, size_t bytes) {
  std::string got;
  char buffer[256];
  while (got.size() < bytes) {
    const ssize_t n = recv(fd, buffer, std::min(sizeof buffer, bytes - got.size()), 0);
    if (n <= 0) break;
    got.append(buffer, static_cast<size_t>(n));
  }
  return got;
}

void send_all(int fd, const std::string& bytes) { send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL); }

// A program that took over a dead rank's address and port: it serves each connection with `reply`
// (a blocking descriptor that times out after 0.5 s of silence) and keeps every byte it was sent.
class Impostor {
 public:
  // Serves one connection; appends what it read to `received`.
  using Reply = std::function<void(int fd, std::string& received)>;
  explicit Impostor(Reply reply) : reply_(std::move(reply)) {
    listen_fd_ = listening_socket(endpoint_);
    if (listen_fd_ >= 0) thread_ = std::thread([this] { serve(); });
  }
  ~Impostor() {
    stop();
    if (listen_fd_ >= 0) close(listen_fd_);
  }
  Impostor(const Impostor&) = delete;
  Impostor& operator=(const Impostor&) = delete;
  const ProbeEndpoint& endpoint() const { return endpoint_; }
  // Stops serving, once the connection it serves is done, and gives every byte it was sent.
  std::string stop_and_tell() {
    stop();
    return received_;
  }

 private:
  void stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }

  void serve() {
    while (!stop_) {
      pollfd ready{listen_fd_, POLLIN, 0};
      if (poll(&ready, 1, 50) <= 0) continue;
      const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      timeval timeout{0, 500000};
      setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
      std::string got;
      reply_(fd, got);
      close(fd);
      received_ += got;
    }
  }

  Reply reply_;
  ProbeEndpoint endpoint_;
  int listen_fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::string received_;  // the thread's until it is joined
};

// A probe port in a child process that the test can stop (SIGSTOP) and continue: a rank the kernel
// does not run for a while, as connections queue up on its port.
class PortInChild {
 public:
  explicit PortInChild(int rank) {
    int pipe_fds[2];
    if (pipe(pipe_fds) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      close(pipe_fds[0]);
      ProbePort port({"127.0.0.1"}, kToken, rank);
      const int number = port.endpoints().empty() ? 0 : port.endpoints()[0].port;
      [[maybe_unused]] const ssize_t written = write(pipe_fds[1], &number, sizeof number);
      for (;;) pause();  // until the test kills it
    }
    close(pipe_fds[1]);
    int number = 0;
    if (pid_ > 0 && read(pipe_fds[0], &number, sizeof number) == sizeof number) endpoint_ = ProbeEndpoint{"127.0.0.1", number};
    close(pipe_fds[0]);
  }
  ~PortInChild() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  PortInChild(const PortInChild&) = delete;
  PortInChild& operator=(const PortInChild&) = delete;
  const ProbeEndpoint& endpoint() const { return endpoint_; }
  bool stop() {
    int status = 0;
    return kill(pid_, SIGSTOP) == 0 && waitpid(pid_, &status, WUNTRACED) == pid_ && WIFSTOPPED(status);
  }
  void resume() { kill(pid_, SIGCONT); }

 private:
  pid_t pid_ = -1;
  ProbeEndpoint endpoint_;
};

// `count` connections to `endpoint`, each sent `payload` (nothing when empty) and then left idle.
std::vector<int> crowd(const ProbeEndpoint& endpoint, int count, const std::string& payload) {
  std::vector<int> fds;
  for (int i = 0; i < count; ++i) {
    const int fd = connect_to(endpoint);
    if (fd < 0) break;
    if (!payload.empty()) send_all(fd, payload);
    fds.push_back(fd);
  }
  return fds;
}

// A rank stopped while a probe and then a crowd of connections queue on its port: continued, it
// must still answer the probe, within the probe's time. The crowd is idle, or has sent a hello
// and stalls; the probe queued first, so a listener that takes the whole queue before reading lets
// the crowd push it out.
void expect_probe_answered_past(const std::string& what, const std::string& crowd_payload) {
  PortInChild rank(7);
  ASSERT_NE(rank.endpoint().port, 0);
  ASSERT_TRUE(rank.stop());
  ProbeOutcome outcome = ProbeOutcome::kUnresolved;
  const auto start = std::chrono::steady_clock::now();
  std::thread prober([&] { outcome = probe_one(rank.endpoint(), 7); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the probe connects and sends its hello
  const std::vector<int> fds = crowd(rank.endpoint(), 200, crowd_payload);
  EXPECT_EQ(fds.size(), 200u) << what;
  rank.resume();
  prober.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(outcome, ProbeOutcome::kAnswers) << what << ": after " << seconds << " s";
  for (const int fd : fds) close(fd);
}

TEST(ProbePort, AFloodOfIdleConnectionsDelaysButCannotSilenceAProbe) { expect_probe_answered_past("200 idle connections", ""); }

TEST(ProbePort, AFloodOfStalledHandshakesDelaysButCannotSilenceAProbe) {
  expect_probe_answered_past("200 hellos that stall", "mbprobe2" + std::string(32, 'n'));
}

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
  EXPECT_EQ(probe_one(port.endpoints()[0], 0, std::string(32, 'u'), kShortProbeSeconds), ProbeOutcome::kNoReply);
}

// The rank is part of what both sides prove: a port of this job answers only for its own rank.
TEST(ProbePort, AnotherRanksPortIsNotAnAnswer) {
  ProbePort port({"127.0.0.1"}, kToken, 3);
  ASSERT_EQ(port.endpoints().size(), 1u);
  EXPECT_NE(probe_one(port.endpoints()[0], 4, kToken, kShortProbeSeconds), ProbeOutcome::kAnswers);
}

// Impostors at a dead rank's address answer in every way that does not need the token: the
// previous protocol's fixed answer, random bytes, the prober's own nonce and proof sent back. None
// passes for the rank, and none is sent the token.
TEST(ProbePort, AnImpostorIsNotTheRankAndIsNotSentTheToken) {
  const std::vector<std::pair<std::string, Impostor::Reply>> impostors = {
      {"the fixed answer",
       [](int fd, std::string& received) {
         received += read_up_to(fd, 40);
         send_all(fd, "!");
         received += read_up_to(fd, 1 << 16);
       }},
      {"random bytes",
       [](int fd, std::string& received) {
         received += read_up_to(fd, 40);
         send_all(fd, std::string("\x8f\x02\x6b\xe1") + std::string(60, '\x5a'));
         received += read_up_to(fd, 1 << 16);
       }},
      {"the prober's own bytes back",
       [](int fd, std::string& received) {
         const std::string hello = read_up_to(fd, 40);
         received += hello;
         send_all(fd, hello.substr(std::min<size_t>(8, hello.size())));  // its nonce, as the listener's
         const std::string proof = read_up_to(fd, 32);
         received += proof;
         send_all(fd, proof);  // its proof, as the answer
         received += read_up_to(fd, 1 << 16);
       }},
  };
  for (const auto& [what, reply] : impostors) {
    Impostor impostor(reply);
    ASSERT_NE(impostor.endpoint().port, 0);
    const ProbeOutcome outcome = probe_one(impostor.endpoint(), 2);
    EXPECT_NE(outcome, ProbeOutcome::kAnswers) << what;
    EXPECT_EQ(outcome, ProbeOutcome::kImpostor) << what;
    const std::string received = impostor.stop_and_tell();
    EXPECT_FALSE(received.empty()) << what << ": the impostor was not probed";
    EXPECT_EQ(received.find(kToken), std::string::npos) << what << ": the impostor was sent the token";
  }
}

// An impostor at rank 2's dead port relays the probe to rank 5's live port of the same job, and
// rank 5's replies back: rank 5 does not answer for rank 2, so the probe is not answered either.
TEST(ProbePort, AnImpostorCannotRelayAnotherRanksAnswer) {
  ProbePort live({"127.0.0.1"}, kToken, 5);
  ASSERT_EQ(live.endpoints().size(), 1u);
  const ProbeEndpoint rank5 = live.endpoints()[0];
  Impostor impostor([&rank5](int prober, std::string& received) {
    const int peer = connect_to(rank5);
    if (peer < 0) return;
    pollfd fds[2] = {{prober, POLLIN, 0}, {peer, POLLIN, 0}};
    char buffer[512];
    for (bool open = true; open && poll(fds, 2, 2000) > 0;) {
      for (int i = 0; i < 2 && open; ++i) {
        if (fds[i].revents == 0) continue;
        const ssize_t n = recv(fds[i].fd, buffer, sizeof buffer, 0);
        open = n > 0;
        if (!open) break;
        if (i == 0) received.append(buffer, static_cast<size_t>(n));
        send(fds[1 - i].fd, buffer, static_cast<size_t>(n), MSG_NOSIGNAL);
      }
    }
    close(peer);
  });
  ASSERT_NE(impostor.endpoint().port, 0);
  EXPECT_NE(probe_one(impostor.endpoint(), 2, kToken, kShortProbeSeconds), ProbeOutcome::kAnswers);
  EXPECT_EQ(impostor.stop_and_tell().find(kToken), std::string::npos) << "the impostor was sent the token";
}

// The lines logged while it lives (by any thread).
class LogCapture {
 public:
  LogCapture() : sink_(std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(256)) {
    spdlog::default_logger()->sinks().push_back(sink_);
  }
  ~LogCapture() {
    auto& sinks = spdlog::default_logger()->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
  }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;
  std::string text() const {
    std::string all;
    for (const std::string& line : sink_->last_formatted()) all += line;
    return all;
  }
  // Waits up to `seconds` for a line that contains `part`.
  bool wait_for(const std::string& part, double seconds) const {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (text().find(part) == std::string::npos) {
      if (std::chrono::steady_clock::now() > until) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return true;
  }

 private:
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink_;
};

// An error that ends the listener's poll: the listener logs it, reopens its port on the same
// address and port, and answers probes there again (rather than leaving a port that accepts and
// never answers).
TEST(ProbePort, APollErrorIsLoggedAndThePortServesAgain) {
  LogCapture log;
  ProbePort port({"127.0.0.1"}, kToken, 1);
  ASSERT_EQ(port.endpoints().size(), 1u);
  const ProbeEndpoint before = port.endpoints()[0];
  port.fail_next_poll_for_testing(EINVAL);
  EXPECT_TRUE(log.wait_for("reopened", 5)) << "logged: " << log.text();
  EXPECT_NE(log.text().find(std::strerror(EINVAL)), std::string::npos) << "logged: " << log.text();
  EXPECT_EQ(probe_one(before, 1), ProbeOutcome::kAnswers);
  ASSERT_EQ(port.endpoints().size(), 1u);
  EXPECT_EQ(port.endpoints()[0].port, before.port);
}

TEST(ProbePort, ARefusedConnectionIsAProcessGoneAndNoPortIsUnresolved) {
  ClosedPort closed;
  const auto outcomes = probe_ports({ProbeTarget{ProbeEndpoint{"127.0.0.1", closed.port()}, 1}, ProbeTarget{ProbeEndpoint{}, 2}},
                                    kToken, kProbeSeconds);
  EXPECT_EQ(outcomes, (std::vector<ProbeOutcome>{ProbeOutcome::kProcessGone, ProbeOutcome::kUnresolved}));
}

}  // namespace
}  // namespace mpibert
