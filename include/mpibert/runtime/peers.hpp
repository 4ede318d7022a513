// Where every rank runs, and which of them still answer when a collective hangs.
//
// A collective that times out says only that some rank did not take part. To name it, every rank
// keeps a TCP port open for the job's lifetime and learns every rank's host and probe addresses at
// setup. The port listens only where the ranks reach each other: on loopback when every rank runs
// on one host, else on each address this host sends from towards another rank's host (the one
// the kernel picks as source for a connection there, so the interface the job's traffic to that
// host uses: a multi-homed host that reaches hosts through different interfaces listens on each).
// Every rank publishes, for each other host, the address it listens on towards it, and a prober
// connects to the one towards its own host.
// A thread answers only a prober that proves it knows the job's token (random bytes that rank 0
// draws and broadcasts over MPI at setup), proving it knows the token too; neither sends it
// (probe_port.hpp, with what each outcome of a probe means). So a stranger is not answered, and a
// program that takes over a dead rank's port neither passes for the rank nor learns the token;
// the token is not secret from whoever can read the job's MPI traffic.
#pragma once

#include <string>
#include <vector>

#include "mpibert/runtime/probe_port.hpp"

namespace mpibert {

// Collective over MPI_COMM_WORLD: agrees on the job's token, opens this rank's probe port (a
// second call replaces it) and exchanges host and probe address with every rank. Host names are
// resolved here, once, so a timeout report needs no name service.
void publish_peer_addresses();

// Every rank's host name, in rank order (empty before publish_peer_addresses).
std::vector<std::string> peer_hosts();

// Every rank's probe address as this rank probes it, "ip:port" in rank order (its address towards
// this rank's host); empty for a rank that opened no port (empty before publish_peer_addresses).
std::vector<std::string> peer_probe_addresses();

// Every address this rank's probe port listens on, "ip:port" (empty before publish_peer_addresses).
std::vector<std::string> own_probe_addresses();

// "HOST (ranks A-B), HOST (ranks C)": where the ranks run, for the log.
std::string describe_placement(const std::vector<std::string>& hosts);

struct PeerProbe {
  int rank = 0;
  std::string host;
  std::string address;  // "ip:port" probed
  using Outcome = ProbeOutcome;
  Outcome outcome = Outcome::kAnswers;
};

// Probes every other rank at once, waiting at most `seconds` for answers. Empty before
// publish_peer_addresses.
std::vector<PeerProbe> probe_peers(double seconds);

// One sentence for a timeout report: the peers that do not answer, each with its host and what
// the probe saw, or that every peer answers.
std::string summarize_probes(const std::vector<PeerProbe>& probes, double seconds);

}  // namespace mpibert
