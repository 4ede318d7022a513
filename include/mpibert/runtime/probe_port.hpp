// The probe port: a TCP port every rank keeps open so that a rank whose collective timed out can
// tell which peer is stuck and which is gone (peers.hpp opens one per rank and publishes it).
//
// A thread answers a connection only when it presents the job's token; anything else is closed
// without a byte and the listener carries on. What a probe of a port can find:
//   answered            the peer's process runs and its host is reachable (it is stuck, not gone);
//   connection refused  its host answers but the process is gone;
//   no reply            its port accepts but nothing answers the token (the process is stopped, or
//                       another program now holds the port);
//   no answer in time   its host or the link to it is down.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace mpibert {

enum class ProbeOutcome { kAnswers, kProcessGone, kNoReply, kNoAnswer, kUnresolved };

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
