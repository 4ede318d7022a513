// Where every rank runs, and which of them still answer when a collective hangs.
//
// A collective that times out says only that some rank did not take part. To name it, every rank
// keeps a TCP port open for the job's lifetime (listening, never accepting: the kernel completes a
// connection in the listen backlog, which is all a probe needs) and learns every rank's host and
// port at setup. The rank that timed out connects to each peer:
//   answers             the peer's process runs and its host is reachable (it is stuck, not gone);
//   connection refused  its host answers but the process is gone;
//   no answer in time   its host or the link to it is down.
#pragma once

#include <string>
#include <vector>

namespace mpibert {

// Collective over MPI_COMM_WORLD: opens this rank's probe port and exchanges host and port with
// every rank. Host names are resolved here, once, so a timeout report needs no name service.
void publish_peer_addresses();

// Every rank's host name, in rank order (empty before publish_peer_addresses).
std::vector<std::string> peer_hosts();

// "HOST (ranks A-B), HOST (ranks C)": where the ranks run, for the log.
std::string describe_placement(const std::vector<std::string>& hosts);

struct PeerProbe {
  int rank = 0;
  std::string host;
  std::string address;  // "ip:port" probed
  enum class Outcome { kAnswers, kProcessGone, kNoAnswer, kUnresolved } outcome = Outcome::kAnswers;
};

// Probes every other rank at once, waiting at most `seconds` for answers. Empty before
// publish_peer_addresses.
std::vector<PeerProbe> probe_peers(double seconds);

// One sentence for a timeout report: the peers that do not answer, each with its host and what
// the probe saw, or that every peer answers.
std::string summarize_probes(const std::vector<PeerProbe>& probes, double seconds);

}  // namespace mpibert
