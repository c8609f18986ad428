#include "ep/expert_parallel.hpp"

#include <algorithm>
#include <sstream>

#include "base/dtype.hpp"
#include "base/env.hpp"
#include "base/log.hpp"
#include "comm/comm.hpp"
#include "topology/rank_info.hpp"

namespace loom::ep {

namespace {

constexpr size_t kMinBufferBytes = 64 << 10;
constexpr size_t kMaxDefaultBufferBytes = 256 << 20;

Verdict checkConfig(const loomEpConfig_t& c, int nranks) {
  Verdict v;
  if (c.size != sizeof(loomEpConfig_t) || c.magic != LOOM_EP_CONFIG_MAGIC)
    v.fail("config was not initialized with LOOM_EP_CONFIG_INITIALIZER");
  else if ((c.modes & ~(LOOM_EP_NORMAL | LOOM_EP_LOW_LATENCY)) != 0 || c.modes == 0)
    v.fail("modes ", c.modes, " is not LOOM_EP_NORMAL and/or LOOM_EP_LOW_LATENCY");
  else if (c.maxTokensPerRank <= 0 || c.hidden <= 0)
    v.fail("maxTokensPerRank (", c.maxTokensPerRank, ") and hidden (", c.hidden,
           ") must be positive");
  else if (!dtypeValid(c.dtype))
    v.fail("unknown data type ", static_cast<int>(c.dtype));
  else if (c.maxTopk < 1 || c.maxTopk > 64)
    v.fail("maxTopk ", c.maxTopk, " is outside [1, 64]");
  else if (c.numExperts <= 0 || c.numExperts % nranks != 0)
    v.fail("numExperts ", c.numExperts, " is not a positive multiple of the ", nranks, " ranks");
  return v;
}

// The normal buffer: one round holds a whole dispatch of the largest size, and a combine round
// at least one token of every origin; between 64 KiB and 256 MiB unless asked for.
size_t bufferFor(const Sizes& s, size_t asked) {
  DispatchFormat d{s.nranks, s.numExperts,   s.maxTopk, (s.hidden + kScaleGroup - 1) / kScaleGroup,
                   true,     s.maxRowBytes()};
  CombineFormat c{s.nranks, s.maxTopk, true, s.maxRowBytes()};
  const size_t least = std::max(d.chunkBytes(1) + 6 * kAlign, c.chunkBytes(s.nranks) + 2 * kAlign);
  if (asked > 0) return asked;
  const size_t env = static_cast<size_t>(std::max<int64_t>(env::epBufferBytes(), 0));
  if (env > 0) return env;
  return std::max(least, std::clamp(d.chunkBytes(s.maxTokens) + 6 * kAlign, kMinBufferBytes,
                                    kMaxDefaultBufferBytes));
}

}  // namespace

ExpertParallel::ExpertParallel(Comm& comm, const loomEpConfig_t& c) : comm_(comm) {
  Verdict v = checkConfig(c, comm.nranks());
  Sizes& s = sizes_;
  s.rank = comm.rank();
  s.nranks = comm.nranks();
  if (v.ok()) {
    s.modes = c.modes;
    s.maxTokens = c.maxTokensPerRank;
    s.hidden = c.hidden;
    s.dtype = c.dtype;
    s.maxTopk = c.maxTopk;
    s.numExperts = c.numExperts;
    s.localExperts = c.numExperts / s.nranks;
    if (s.modes & LOOM_EP_NORMAL) s.bufferBytes = bufferFor(s, c.bufferBytes);
    DispatchFormat d{s.nranks, s.numExperts, 0, 0, false, 1};
    CombineFormat cf{s.nranks, 0, false, 1};
    if ((s.modes & LOOM_EP_NORMAL) &&
        (d.capacity(s.bufferBytes) == 0 || cf.tokensPerRound(s.bufferBytes) == 0))
      v.fail("bufferBytes ", s.bufferBytes, " holds no token");
  }
  // Every rank's verdict and sizes, so that a bad or differing size fails every rank.
  std::ostringstream mine;
  mine << v.status << '\n' << v.reason << '\n' << s.describe() << " buffer " << s.bufferBytes;
  std::vector<std::string> all = comm.allGatherForSetUp(mine.str());
  for (int r = 0; r < s.nranks; ++r) {
    std::istringstream in(all[r]);
    int status = 0;
    std::string reason, sizes;
    in >> status;
    in.ignore();
    std::getline(in, reason);
    std::getline(in, sizes);
    LOOM_CHECK_ARG(status == loomSuccess, "loomEpCreate: rank ", r, "'s config: ", reason);
    const std::string ours = all[s.rank].substr(all[s.rank].rfind('\n') + 1);
    LOOM_CHECK_ARG(sizes == ours, "loomEpCreate: sizes differ across ranks: rank ", s.rank, " has ",
                   ours, ", rank ", r, " has ", sizes);
  }
  setUpNative(comm);
  if (native_) {
    LOOM_INFO(kSubsysInit, s.rank, "expert parallelism: ", s.describe(), "; ", native_->describe());
    return;
  }
  if (!comm.device().caps().hostAddressable) staging_ = std::make_unique<Staging>(comm.device());
  path_ = comm.nodes().singleNode() ? makeShmPath(comm, s) : makeWirePath(comm, s);
  LOOM_INFO(kSubsysInit, s.rank, "expert parallelism: ", s.describe(), "; ",
            comm.nodes().singleNode() ? "shared memory" : "network channels",
            staging_ ? ", this rank staged through pinned host memory" : "");
}

void ExpertParallel::setUpNative(Comm& comm) {
  // The backend's kernels need every rank on it (its native collectives are up) and one process
  // per device (a process cannot map its own exported memory); the same on every rank.
  if (comm.hostContext().native == nullptr || !comm.nodes().singleNode()) return;
  const std::vector<int> processes = processNumbers(comm.ranks());
  for (int r = 0; r < sizes_.nranks; ++r)
    if (processes[r] != r) return;
  NativeEpSetup setup;
  setup.rank = sizes_.rank;
  setup.nranks = sizes_.nranks;
  setup.modes = sizes_.modes;
  setup.maxTokens = sizes_.maxTokens;
  setup.hidden = sizes_.hidden;
  setup.maxTopk = sizes_.maxTopk;
  setup.numExperts = sizes_.numExperts;
  setup.localExperts = sizes_.localExperts;
  setup.maxRowBytes = sizes_.maxRowBytes();
  setup.bufferBytes = sizes_.bufferBytes;
  setup.timeoutMs = comm.config().timeoutMs;
  setup.allGather = [&comm](const std::string& mine) { return comm.allGatherForSetUp(mine); };
  try {
    native_ = comm.device().createEp(setup);
  } catch (const Error& e) {
    // Every rank fails alike (the backend exchanges its verdict): all use the host paths.
    if (e.code() != loomUnhandledCudaError) throw;
    LOOM_WARN(kSubsysInit, sizes_.rank, "expert parallelism: ", e.what(),
              "; using the host paths (staged through host memory)");
  }
}

ExpertParallel::~ExpertParallel() = default;

void ExpertParallel::checkStream(loomStream_t stream, Verdict& v) const {
  if (stream != nullptr && !comm_.onDevice()) v.fail("a CPU communicator takes a NULL stream");
}

void ExpertParallel::layout(const int64_t* topkIdx, int numTokens, int topk, int32_t* perRank,
                            int32_t* perExpert, uint8_t* inRank, loomStream_t stream) {
  Verdict v;
  if (native_) {
    if (numTokens < 0 || numTokens > sizes_.maxTokens || topk < 1 || topk > sizes_.maxTopk ||
        (numTokens > 0 && topkIdx == nullptr))
      LOOM_THROW(loomInvalidArgument, "loomEpLayout: ", numTokens, " tokens, topk ", topk,
                 " outside the sizes given at creation, or topkIdx NULL");
    return native_->layout(topkIdx, numTokens, topk, perRank, perExpert, inRank, stream);
  }
  checkStream(stream, v);
  if (numTokens < 0 || numTokens > sizes_.maxTokens)
    v.fail(numTokens, " tokens exceed the ", sizes_.maxTokens, " per rank given at creation");
  if (topk < 1 || topk > sizes_.maxTopk)
    v.fail("topk ", topk, " is outside [1, ", sizes_.maxTopk, "]");
  if (numTokens > 0 && topkIdx == nullptr) v.fail("topkIdx is NULL");
  LOOM_CHECK_ARG(v.ok(), "loomEpLayout: ", v.reason);
  const size_t n = static_cast<size_t>(numTokens);
  if (staging_) {
    Staging& s = *staging_;
    const int64_t* hostTopk = nullptr;
    int32_t *hostRank = nullptr, *hostExpert = nullptr;
    uint8_t* hostIn = nullptr;
    for (int pass = 0; pass < 2; ++pass) {
      pass == 0 ? s.measure() : s.stage(stream);
      hostTopk = s.input(topkIdx, n * topk);
      hostRank = s.output(perRank, sizes_.nranks);
      hostExpert = s.output(perExpert, sizes_.numExperts);
      hostIn = s.output(inRank, n * sizes_.nranks);
    }
    s.arrived();
    checkExpertIds(sizes_, hostTopk, numTokens, topk, v);
    LOOM_CHECK_ARG(v.ok(), "loomEpLayout: ", v.reason);
    computeLayout(sizes_, hostTopk, numTokens, topk, hostRank, hostExpert, hostIn);
    s.finish();
    return;
  }
  checkExpertIds(sizes_, topkIdx, numTokens, topk, v);
  LOOM_CHECK_ARG(v.ok(), "loomEpLayout: ", v.reason);
  computeLayout(sizes_, topkIdx, numTokens, topk, perRank, perExpert, inRank);
}

}  // namespace loom::ep
