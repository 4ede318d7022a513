// The probe port: a TCP port every rank keeps open so that a rank whose collective timed out can
// tell which peer is stuck and which is gone (peers.hpp opens one per rank and publishes it).
//
// Prober and listener prove to each other that they know the job's token (random bytes rank 0
// draws and broadcasts over MPI at setup) without sending it, each with an HMAC-SHA256 under the
// token of its side's name, the rank probed and both sides' fresh nonces:
//   prober -> listener   hello: "mbprobe2" and the prober's nonce (else: closed without a byte)
//   listener -> prober   the listener's nonce
//   prober -> listener   the prober's MAC (wrong: closed without another byte)
//   listener -> prober   the listener's MAC
// So whoever holds a port without the token (another program on a dead rank's port) learns no
// more than a nonce and the prober's MAC for that exchange, and cannot pass for the rank; a
// stranger that connects to a listener learns a nonce. A listener's thread serves connections
// while its rank computes, stuck or not: it reads each as soon as it is accepted, holds at most 128
// in the handshake, each for 2 s at most, and makes room by dropping the oldest that has sent
// nothing (else the one silent longest); a prober whose connection is closed between messages
// connects again while its time lasts. So a crowd of connections delays an answer but does not
// silence it. An error the thread cannot serve past (a failed poll, a broken listening socket) is
// logged and the port reopened on its address and port, so that it never accepts what no one
// answers. What a probe finds:
//   answered             the listener proved the token for that rank: the rank's process runs and
//                        its host is reachable (it is stuck, not gone);
//   connection refused   its host answers but the process is gone (or, for the moment between
//                        close and bind, its port is being reopened after an error it logged);
//   no reply             the port accepts but the handshake does not complete in time (the process
//                        is stopped, or another program holds the port);
//   a wrong answer       a reply the rank's listener never sends (a wrong MAC, a message cut
//                        short): another program holds the port, so the process is gone (or
//                        could not reopen its port after an error, which it logged);
//   no answer in time    its host or the link to it is down.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace mpibert {

enum class ProbeOutcome { kAnswers, kProcessGone, kNoReply, kImpostor, kNoAnswer, kUnresolved };

// A job's token: kProbeTokenBytes random bytes from the kernel (rank 0 draws it).
constexpr size_t kProbeTokenBytes = 32;
std::string new_probe_token();

struct ProbeEndpoint {
  std::string ip;  // IPv4
  int port = 0;
};

// Listens on each of `ips` and answers the probes of rank `rank` of the job whose token is `token`,
// from a thread of its own (so a rank stuck in a collective still answers), until destroyed.
class ProbePort {
 public:
  ProbePort(const std::vector<std::string>& ips, const std::string& token, int rank);
  ~ProbePort();
  ProbePort(const ProbePort&) = delete;
  ProbePort& operator=(const ProbePort&) = delete;
  // Where it listens: the addresses of `ips` it could listen on, in order.
  std::vector<ProbeEndpoint> endpoints() const;
  // "cannot listen on IP: REASON" for each address it could not listen on.
  std::vector<std::string> problems() const;
  // Test hook: the listener thread's next poll fails with `error` as if the kernel had returned it.
  void fail_next_poll_for_testing(int error);

 private:
  class Listener;
  std::vector<std::unique_ptr<Listener>> listeners_;
  std::vector<std::string> problems_;
};

struct ProbeTarget {
  ProbeEndpoint endpoint;
  int rank = 0;  // the rank expected to answer there
};

// Probes every target at once, waiting at most `seconds` for answers: one outcome per target, in
// order. A target whose port is 0 is kUnresolved.
std::vector<ProbeOutcome> probe_ports(const std::vector<ProbeTarget>& targets, const std::string& token, double seconds);

}  // namespace mpibert
