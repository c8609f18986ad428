// The RTT estimate (RFC 6298) and the congestion window: its growth as ACKs deliver packets, its
// reduction once per loss episode.
#include <algorithm>

#include "transport/rudp/rudp_flow.hpp"

namespace loom::rudp {

namespace {
constexpr double kBeta = 0.7;  // the window after a loss episode (CUBIC's factor)
}  // namespace

void Flow::sampleRtt(uint64_t r) {
  minRtt_ = std::min(minRtt_, r);
  if (!haveRtt_) {
    srtt_ = r;
    rttvar_ = r / 2;
    haveRtt_ = true;
  } else {
    uint64_t diff = srtt_ > r ? srtt_ - r : r - srtt_;
    rttvar_ = (3 * rttvar_ + diff) / 4;
    srtt_ = (7 * srtt_ + r) / 8;
  }
  rto_ = std::clamp(srtt_ + 4 * rttvar_, cfg_.rtoMinNs, cfg_.rtoMaxNs);
}

void Flow::growWindow(uint64_t newly) {
  if (cwnd_ < ssthresh_)
    cwnd_ += static_cast<double>(newly);
  else
    cwnd_ += static_cast<double>(newly) / cwnd_;
  cwnd_ = std::min(cwnd_, static_cast<double>(maxPkts_));
}

void Flow::enterRecovery() {
  if (recovery_) return;  // one reduction per episode: a burst of losses is one signal
  recovery_ = true;
  recoveryEnd_ = sndNxt_;
  // Back off, then regrow at slow-start speed to where the window was (about half an RTT), and
  // probe beyond it additively: on a fabric that drops at random a loss is not a full queue,
  // and a window that takes hundreds of RTTs to regrow (Reno) would make 1 % loss cost most of the
  // throughput; a real bottleneck still sees the window dip at every episode and stop growing.
  ssthresh_ = cwnd_;
  cwnd_ = std::max(cwnd_ * kBeta, static_cast<double>(cfg_.minCwnd));
  // RFC 8985's reo_wnd_persist: reordering not seen again for 16 episodes is over.
  if (pathReordering_ && ++quietEpisodes_ >= 16) pathReordering_ = false;
}

}  // namespace loom::rudp
