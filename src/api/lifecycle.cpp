// C entry points for versions, errors and communicator lifetime.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>
#include <tuple>
#include <vector>

#include "api/handle.hpp"
#include "api/thread_state.hpp"
#include "base/env.hpp"
#include "base/log.hpp"
#include "base/sha256.hpp"
#include "bootstrap/bootstrap.hpp"
#include "device/registry.hpp"

namespace loom {

namespace {}

void setLastError(const std::string& message) { apiThreadState().lastError = message; }
const std::string& lastError() { return apiThreadState().lastError; }

HandleUse::HandleUse(loomComm_t handle) {
  LOOM_CHECK_ARG(handle != nullptr, "communicator is NULL");
  LOOM_CHECK_ARG(handle->magic == loomComm::kMagic, "argument is not a Loom communicator");
  handle->inflight.fetch_add(1);
  HandleState state = handle->state.load();
  if (state == HandleState::kDestroying || state == HandleState::kDestroyed) {
    handle->inflight.fetch_sub(1);
    LOOM_THROW(loomInvalidUsage, state == HandleState::kDestroyed
                                     ? "communicator was destroyed"
                                     : "communicator is being destroyed by another thread");
  }
  handle_ = handle;
}

Comm& HandleUse::comm() const {
  // The flag, not the pointer: a non-blocking initialization writes the pointer on its progress
  // queue.
  if (!handle_->ready.load()) {
    std::string message;
    loomResult_t error = handle_->queue ? handle_->queue->error(&message) : loomInternalError;
    if (error != loomSuccess) LOOM_THROW(error, "communicator initialization failed: ", message);
    LOOM_THROW(loomInProgress, "communicator is still initializing (non-blocking init)");
  }
  return *handle_->comm;
}

namespace {

// Creates the handle and builds the Comm now or, for a non-blocking config, on its progress queue.
loomResult_t initHandle(loomComm_t* out, int nranks, int rank, const CommConfig& cfg,
                        std::function<std::unique_ptr<Comm>(const CommConfig&)> build) {
  auto handle = std::make_unique<loomComm>();
  handle->blocking = cfg.blocking;
  handle->nranks = nranks;
  handle->rank = rank;
  CommConfig withFlag = cfg;
  withFlag.abortFlag = &handle->abortFlag;
  if (cfg.blocking) {
    handle->comm = build(withFlag);
    handle->ready.store(true);
    handle->state.store(HandleState::kLive);
    *out = handle.release();
    return loomSuccess;
  }
  handle->queue = std::make_unique<ProgressQueue>();
  withFlag.progress = handle->queue.get();
  withFlag.progressRoot = true;
  loomComm* raw = handle.get();
  raw->queue->submit([raw, build, withFlag](bool) {
    raw->comm = build(withFlag);
    raw->ready.store(true);
    // A destroy that began meanwhile owns the handle now: it must not come back to life.
    HandleState expected = HandleState::kInitializing;
    raw->state.compare_exchange_strong(expected, HandleState::kLive);
  });
  *out = handle.release();
  return loomInProgress;
}

void checkRankArgs(loomComm_t* comm, int nranks, int rank) {
  LOOM_CHECK_ARG(comm != nullptr, "comm output pointer is NULL");
  *comm = nullptr;  // a failed init leaves no stale handle behind
  LOOM_CHECK_ARG(nranks >= 1, "nranks must be >= 1, got ", nranks);
  LOOM_CHECK_ARG(rank >= 0 && rank < nranks, "rank ", rank, " is out of range [0, ", nranks, ")");
}

// "host:port" or "[v6addr]:port".
std::pair<std::string, uint16_t> parseAddress(const std::string& text, const char* what) {
  size_t colon = text.rfind(':');
  LOOM_CHECK_ARG(colon != std::string::npos && colon > 0, what, "='", text, "' is not host:port");
  std::string host = text.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  char* end = nullptr;
  long port = std::strtol(text.c_str() + colon + 1, &end, 10);
  LOOM_CHECK_ARG(*end == '\0' && port > 0 && port < 65536, what, "='", text,
                 "' has no valid port (1 to 65535)");
  return {host, static_cast<uint16_t>(port)};
}

// Before a communicator exists: a bad LOOM_DEBUG or LOOM_DEBUG_SUBSYS (log.cpp only warns) or any
// malformed or out-of-range LOOM_* value fails init with its reason, whether or not this
// communicator would use it; rank 0 says which Loom this is, as NCCL does at NCCL_DEBUG=VERSION.
void announce(int rank) {
  checkLogSettings();
  env::checkAll();
  if (rank != 0) return;
  LOOM_LOG(kVersion, kSubsysInit, rank, "Loom version ", LOOM_MAJOR, ".", LOOM_MINOR, ".",
           LOOM_PATCH);
}

// The first host of a Slurm node list: "node[03-05,9],gpu1" -> "node03".
std::string firstSlurmHost(const std::string& list) {
  size_t end = list.find_first_of(",[");
  if (end == std::string::npos || list[end] == ',') return list.substr(0, end);
  size_t stop = list.find_first_of(",-]", end + 1);
  LOOM_CHECK_ARG(stop != std::string::npos, "SLURM node list '", list, "' has no closing ]");
  return list.substr(0, end) + list.substr(end + 1, stop - end - 1);
}

// Under srun without MASTER_ADDR: rank 0 runs on the step's first node (Slurm's block
// distribution), and every rank derives the same port from the job and step ids, in 20000-32767:
// below Linux's ephemeral range (32768-60999), whose ports outgoing connections take at random
// (the test suite's srun case once found its port taken by one).
bool slurmRendezvous(std::string* host, uint16_t* port) {
  auto nodes = env::get("SLURM_STEP_NODELIST");
  if (!nodes) nodes = env::get("SLURM_JOB_NODELIST");
  auto job = env::get("SLURM_JOB_ID");
  if (!nodes || !job || !env::get("SLURM_PROCID")) return false;
  *host = firstSlurmHost(*nodes);
  const int64_t step = env::getInt("SLURM_STEP_ID", 0);
  *port = static_cast<uint16_t>(20000 + (env::getInt("SLURM_JOB_ID", 0) * 16 + step) % 12768);
  return true;
}

int envRank(const char* const* names, const char* what, const char** from = nullptr) {
  for (const char* const* n = names; *n != nullptr; ++n) {
    if (!env::get(*n)) continue;
    if (from != nullptr) *from = *n;
    return static_cast<int>(env::getInt(*n, -1));
  }
  LOOM_THROW(loomInvalidArgument, "no ", what,
             " in the environment (run under loomrun, torchrun, mpirun or srun, or set LOOM_RANK "
             "and LOOM_WORLD_SIZE)");
}

// Under loomrun (LOOMRUN_WORLD_SIZE) the job's world size is known: a rank asking for another
// would wait at the rendezvous until the timeout for ranks loomrun never starts (or leave some
// out); it fails at once instead, and loomrun stops the job with its message.
void checkLauncherWorld(int nranks, const char* sizeFrom) {
  const auto launched = env::get("LOOMRUN_WORLD_SIZE");
  if (!launched || std::to_string(nranks) == *launched) return;
  LOOM_THROW(loomInvalidArgument, "this rank asks for a world of ", nranks, " ranks (", sizeFrom,
             "=", nranks, ") but loomrun started ", *launched,
             " (loomrun -n, --nnodes, --world-size): the rendezvous would wait for ranks that "
             "never come; make them agree");
}

// Ranks `ranks` of one communicator, each built on its own thread (each one's init waits for
// all nranks ranks). The first failure raises every other rank's abort flag, which their
// bootstraps watch, so they give up at once instead of waiting for the failed one until the
// timeout. All or nothing: comms get handles only when every rank succeeded.
loomResult_t initRanksTogether(loomComm_t* comms, int nranks, const UniqueId& id,
                               const std::vector<int>& ranks, const std::vector<CommConfig>& cfgs) {
  const size_t count = ranks.size();
  std::vector<std::unique_ptr<loomComm>> handles(count);
  for (size_t i = 0; i < count; ++i) {
    handles[i] = std::make_unique<loomComm>();
    handles[i]->nranks = nranks;
    handles[i]->rank = ranks[i];
  }
  std::vector<std::optional<Error>> errors(count);
  std::atomic<int> firstFailed{-1};
  auto failAll = [&](size_t i) {
    int none = -1;
    if (!firstFailed.compare_exchange_strong(none, static_cast<int>(i))) return;
    for (auto& h : handles) h->abortFlag.store(true);
  };
  std::vector<std::thread> threads;
  threads.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    threads.emplace_back([&, i] {
      try {
        CommConfig c = cfgs[i];
        c.abortFlag = &handles[i]->abortFlag;
        handles[i]->comm = std::make_unique<Comm>(id, nranks, ranks[i], c);
      } catch (const Error& e) {
        errors[i] = e;
        failAll(i);
      } catch (const std::exception& e) {
        errors[i] = Error(loomInternalError, e.what());
        failAll(i);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const int failed = firstFailed.load();
  if (failed >= 0) {
    const Error& e = *errors[static_cast<size_t>(failed)];
    LOOM_THROW(e.code(), "rank ", ranks[static_cast<size_t>(failed)], " (of the ", count,
               " made together): ", e.what());
  }
  for (size_t i = 0; i < count; ++i) {
    handles[i]->ready.store(true);
    handles[i]->state.store(HandleState::kLive);
    comms[i] = handles[i].release();
  }
  return loomSuccess;
}

// The device of rank i of loomCommInitAll(Config): one per rank, of the config's kind.
std::string initAllDevice(const CommConfig& cfg, bool kindGiven, const int* devlist, int i) {
  if (!kindGiven) return "cuda:" + std::to_string(devlist != nullptr ? devlist[i] : i);
  const auto [kind, index] = parseDeviceSpec(cfg.device);
  LOOM_CHECK_ARG(index < 0, "config->device \"", cfg.device,
                 "\" names one device; loomCommInitAll puts one rank on each device: pass the "
                 "kind (\"cuda\", \"cpu\", a plug-in's) and devlist");
  if (kind == "cpu") {
    LOOM_CHECK_ARG(devlist == nullptr, "devlist must be NULL for device \"cpu\"");
    return "cpu";
  }
  return kind + ":" + std::to_string(devlist != nullptr ? devlist[i] : i);
}

}  // namespace
}  // namespace loom

using namespace loom;

extern "C" {

loomResult_t loomGetVersion(int* version) {
  return guarded("loomGetVersion", [&] {
    LOOM_CHECK_ARG(version != nullptr, "version is NULL");
    *version = LOOM_VERSION_CODE;
    return loomSuccess;
  });
}

const char* loomGetErrorString(loomResult_t result) {
  switch (result) {
    case loomSuccess:
      return "no error";
    case loomUnhandledCudaError:
      return "unhandled cuda error";
    case loomSystemError:
      return "unhandled system error (out of memory, sockets, shared memory)";
    case loomInternalError:
      return "internal error (a bug in Loom)";
    case loomInvalidArgument:
      return "invalid argument";
    case loomInvalidUsage:
      return "invalid usage (wrong call order or mismatched calls across ranks)";
    case loomRemoteError:
      return "remote process exited or a peer failed";
    case loomInProgress:
      return "operation in progress";
    case loomTimeout:
      return "timed out waiting for peers";
    default:
      return "unknown result code";
  }
}

const char* loomGetLastError(loomComm_t) { return lastError().c_str(); }

loomResult_t loomGetUniqueId(loomUniqueId* uniqueId) {
  return guarded("loomGetUniqueId", [&] {
    LOOM_CHECK_ARG(uniqueId != nullptr, "uniqueId is NULL");
    UniqueId id = startRendezvousRoot("", 0, JobSecret::random(), env::timeoutMs());
    packUniqueId(id, uniqueId);
    return loomSuccess;
  });
}

loomResult_t loomCommInitRankConfig(loomComm_t* comm, int nranks, loomUniqueId commId, int rank,
                                    loomConfig_t* config) {
  return guarded("loomCommInitRankConfig", [&] {
    checkRankArgs(comm, nranks, rank);
    *comm = nullptr;
    announce(rank);
    CommConfig cfg = resolveConfig(config);
    UniqueId id = unpackUniqueId(commId);
    return initHandle(comm, nranks, rank, cfg, [=](const CommConfig& c) {
      return std::make_unique<Comm>(id, nranks, rank, c);
    });
  });
}

loomResult_t loomCommInitRank(loomComm_t* comm, int nranks, loomUniqueId commId, int rank) {
  return loomCommInitRankConfig(comm, nranks, commId, rank, nullptr);
}

loomResult_t loomCommInitRanksConfig(loomComm_t* comms, int count, int nranks, loomUniqueId commId,
                                     const int* ranks, loomConfig_t* const* configs) {
  return guarded("loomCommInitRanksConfig", [&] {
    LOOM_CHECK_ARG(comms != nullptr, "comms is NULL");
    LOOM_CHECK_ARG(count >= 1, "count must be >= 1, got ", count);
    LOOM_CHECK_ARG(ranks != nullptr, "ranks is NULL");
    for (int i = 0; i < count; ++i) comms[i] = nullptr;
    LOOM_CHECK_ARG(nranks >= 1, "nranks must be >= 1, got ", nranks);
    std::vector<int> chosen(ranks, ranks + count);
    std::vector<CommConfig> cfgs;
    for (int i = 0; i < count; ++i) {
      LOOM_CHECK_ARG(chosen[i] >= 0 && chosen[i] < nranks, "ranks[", i, "] = ", chosen[i],
                     " is out of range [0, ", nranks, ")");
      for (int j = 0; j < i; ++j)
        LOOM_CHECK_ARG(chosen[j] != chosen[i], "rank ", chosen[i], " is given twice");
      cfgs.push_back(resolveConfig(configs != nullptr ? configs[i] : nullptr));
      LOOM_CHECK_ARG(cfgs.back().blocking, "ranks made together are blocking: configs[", i,
                     "] asks for non-blocking");
      announce(chosen[i]);
    }
    return initRanksTogether(comms, nranks, unpackUniqueId(commId), chosen, cfgs);
  });
}

loomResult_t loomCommInitAllConfig(loomComm_t* comms, int ndev, const int* devlist,
                                   loomConfig_t* config) {
  return guarded("loomCommInitAll", [&] {
    LOOM_CHECK_ARG(comms != nullptr, "comms is NULL");
    LOOM_CHECK_ARG(ndev >= 1, "ndev must be >= 1, got ", ndev);
    for (int i = 0; i < ndev; ++i) comms[i] = nullptr;
    for (int i = 0; devlist != nullptr && i < ndev; ++i)
      LOOM_CHECK_ARG(devlist[i] >= 0, "devlist[", i, "] = ", devlist[i], " is negative");
    CommConfig base = resolveConfig(config);
    LOOM_CHECK_ARG(base.blocking, "loomCommInitAll makes blocking communicators");
    const bool kindGiven =
        config != nullptr && config->device != nullptr && std::string(config->device) != "cuda";
    std::vector<int> ranks;
    std::vector<CommConfig> cfgs;
    for (int i = 0; i < ndev; ++i) {
      ranks.push_back(i);
      cfgs.push_back(base);
      cfgs.back().device = initAllDevice(base, kindGiven, devlist, i);
    }
    announce(0);
    UniqueId id = startRendezvousRoot("", 0, JobSecret::random(), base.timeoutMs);
    return initRanksTogether(comms, ndev, id, ranks, cfgs);
  });
}

loomResult_t loomCommInitAll(loomComm_t* comms, int ndev, const int* devlist) {
  return loomCommInitAllConfig(comms, ndev, devlist, nullptr);
}

loomResult_t loomCommInitFromEnv(loomComm_t* comm, loomConfig_t* config) {
  return guarded("loomCommInitFromEnv", [&] {
    // Launchers in order: Loom's own, torchrun/loomrun, Open MPI, MPICH/Hydra, Slurm's srun.
    static const char* const rankNames[] = {"LOOM_RANK", "RANK",         "OMPI_COMM_WORLD_RANK",
                                            "PMI_RANK",  "SLURM_PROCID", nullptr};
    static const char* const sizeNames[] = {"LOOM_WORLD_SIZE",      "WORLD_SIZE",
                                            "OMPI_COMM_WORLD_SIZE", "PMI_SIZE",
                                            "SLURM_NTASKS",         nullptr};
    if (comm != nullptr) *comm = nullptr;
    const char* sizeFrom = nullptr;
    int rank = envRank(rankNames, "rank");
    int nranks = envRank(sizeNames, "world size", &sizeFrom);
    checkRankArgs(comm, nranks, rank);
    checkLauncherWorld(nranks, sizeFrom);
    *comm = nullptr;
    announce(rank);
    CommConfig cfg = resolveConfig(config);
    UniqueId id;
    std::string commIdText = env::commId();
    if (!commIdText.empty()) {
      std::tie(id.host, id.port) = parseAddress(commIdText, "LOOM_COMM_ID");
    } else if (!env::get("MASTER_ADDR") && slurmRendezvous(&id.host, &id.port)) {
      // srun sets no address: the step's first node, a port derived from the job and step ids.
    } else {
      auto addr = env::get("MASTER_ADDR");
      auto port = env::get("MASTER_PORT");
      LOOM_CHECK_ARG(addr && port,
                     "no rendezvous address: set LOOM_COMM_ID=host:port (loomrun "
                     "does) or MASTER_ADDR and MASTER_PORT (torchrun does; under srun, "
                     "SLURM_STEP_NODELIST and SLURM_JOB_ID suffice)");
      // MASTER_PORT itself belongs to torch's store; Loom's rendezvous uses the next port.
      std::tie(id.host, id.port) = parseAddress(
          *addr + ":" + std::to_string(env::getInt("MASTER_PORT", 0) + 1), "MASTER_PORT");
    }
    std::string secretHex = env::jobSecret();
    if (!secretHex.empty()) id.secret = JobSecret::fromHex(secretHex);
    // Every rank derives the same job nonce from what they share.
    std::string seed = id.host + ":" + std::to_string(id.port) + ":" + secretHex;
    Sha256Digest digest = sha256(seed);
    std::memcpy(&id.jobNonce, digest.data(), sizeof(id.jobNonce));
    if (rank == 0) startRendezvousRoot(id.host, id.port, id.secret, cfg.timeoutMs);
    return initHandle(comm, nranks, rank, cfg, [=](const CommConfig& c) {
      return std::make_unique<Comm>(id, nranks, rank, c);
    });
  });
}

loomResult_t loomCommSplit(loomComm_t comm, int color, int key, loomComm_t* newcomm,
                           loomConfig_t* config) {
  return guarded("loomCommSplit", [&] {
    LOOM_CHECK_ARG(newcomm != nullptr, "newcomm is NULL");
    LOOM_CHECK_ARG(color >= 0 || color == LOOM_SPLIT_NOCOLOR, "color must be >= 0 or ",
                   "LOOM_SPLIT_NOCOLOR, got ", color);
    HandleUse use(comm);
    *newcomm = nullptr;
    CommConfig cfg = config != nullptr ? resolveConfig(config) : use.comm().config();
    // A config that names no device keeps the parent's: a child of a CUDA communicator runs on
    // the same GPU (as ncclCommSplit's children do), not on the host.
    if (config != nullptr && config->device == nullptr) cfg.device = use.comm().config().device;
    // LOOM_ALGO is read when a communicator is made, also by a split without a config.
    cfg.algo = env::algoOverride();
    cfg.abortFlag = nullptr;  // the child has its own (the parent's belongs to the parent's handle)
    LOOM_CHECK_ARG(cfg.blocking, "non-blocking split is not supported yet: pass a blocking config");
    std::unique_ptr<Comm> child = use.comm().split(color, key, cfg);
    if (child == nullptr) return loomSuccess;
    auto handle = std::make_unique<loomComm>();
    handle->nranks = child->nranks();
    handle->rank = child->rank();
    handle->comm = std::move(child);
    handle->ready.store(true);
    handle->state.store(HandleState::kLive);
    *newcomm = handle.release();
    return loomSuccess;
  });
}

loomResult_t loomCommFinalize(loomComm_t comm) {
  return guarded("loomCommFinalize", [&] {
    HandleUse use(comm);
    if (use->queue) use->queue->drain();
    return loomSuccess;
  });
}

namespace {
// Destroyed handles stay allocated (see handle.hpp). Listing them keeps them reachable, so that
// leak checkers (LeakSanitizer in the ASan build) do not report each one as a leak.
void keepTombstone(loomComm* handle) {
  static std::mutex mutex;
  static auto* tombstones = new std::vector<loomComm*>();  // never freed, like the tombstones
  std::lock_guard<std::mutex> lock(mutex);
  tombstones->push_back(handle);
}

loomResult_t destroyHandle(loomComm_t comm, bool abort) {
  LOOM_CHECK_ARG(comm != nullptr, "communicator is NULL");
  LOOM_CHECK_ARG(comm->magic == loomComm::kMagic, "argument is not a Loom communicator");
  // A loop: a non-blocking initialization may turn kInitializing into kLive meanwhile.
  HandleState state = comm->state.load();
  do {
    if (state != HandleState::kLive && state != HandleState::kInitializing)
      LOOM_THROW(loomInvalidUsage, "communicator was already destroyed or is being destroyed");
  } while (!comm->state.compare_exchange_weak(state, HandleState::kDestroying));
  // A non-blocking initialization still running gives up at once (its bootstrap watches this
  // flag); nobody can use a communicator that is being destroyed anyway.
  if (state == HandleState::kInitializing) comm->abortFlag.store(true);
  // While a non-blocking initialization runs, its progress queue may be writing comm->comm.
  if (abort && state == HandleState::kLive)
    comm->comm->abort("loomCommAbort called on rank " + std::to_string(comm->rank));
  // Calls already running finish (they are bounded by the timeout; abort makes them fail fast).
  while (comm->inflight.load() > 0) std::this_thread::sleep_for(std::chrono::microseconds(100));
  // What is queued runs first (an aborted communicator fails it quickly); the communicator goes
  // before the queue it uses.
  if (comm->queue) comm->queue->drain();
  comm->comm.reset();
  comm->queue.reset();
  comm->state.store(HandleState::kDestroyed);
  keepTombstone(comm);
  return loomSuccess;
}
}  // namespace

loomResult_t loomCommDestroy(loomComm_t comm) {
  return guarded("loomCommDestroy", [&] { return destroyHandle(comm, false); });
}

loomResult_t loomCommAbort(loomComm_t comm) {
  return guarded("loomCommAbort", [&] { return destroyHandle(comm, true); });
}

loomResult_t loomCommGetAsyncError(loomComm_t comm, loomResult_t* asyncError) {
  return guarded("loomCommGetAsyncError", [&] {
    LOOM_CHECK_ARG(asyncError != nullptr, "asyncError is NULL");
    HandleUse use(comm);
    if (use->queue) {
      std::string message;
      loomResult_t error = use->queue->error(&message);
      if (error != loomSuccess) {
        setLastError(message);
        *asyncError = error;
        return loomSuccess;
      }
      if (use->queue->busy()) {
        *asyncError = loomInProgress;
        return loomSuccess;
      }
    }
    *asyncError = use->comm ? use->comm->asyncError() : loomInProgress;
    if (*asyncError != loomSuccess && use->comm) setLastError(use->comm->asyncMessage());
    return loomSuccess;
  });
}

loomResult_t loomCommCount(const loomComm_t comm, int* count) {
  return guarded("loomCommCount", [&] {
    LOOM_CHECK_ARG(count != nullptr, "count is NULL");
    HandleUse use(comm);
    *count = use->nranks;
    return loomSuccess;
  });
}

loomResult_t loomCommUserRank(const loomComm_t comm, int* rank) {
  return guarded("loomCommUserRank", [&] {
    LOOM_CHECK_ARG(rank != nullptr, "rank is NULL");
    HandleUse use(comm);
    *rank = use->rank;
    return loomSuccess;
  });
}

loomResult_t loomCommDescribeTopology(const loomComm_t comm, char* text, size_t size,
                                      size_t* needed) {
  return guarded("loomCommDescribeTopology", [&] {
    LOOM_CHECK_ARG(text != nullptr || size == 0, "text is NULL but size is ", size);
    HandleUse use(comm);
    const Comm& c = use.comm();
    std::string out = c.nodes().describe() + "\n" + c.clusters().describe() +
                      "\ndevice: " + c.deviceDescription() + "\n";
    if (c.clusters().heterogeneous()) out += c.describeHeterogeneous() + "\n";
    if (!c.transports().interface().empty())
      out += "tcp interface: " + c.transports().interface() + "\n";
    // Appended piece by piece: GCC 12 warns (-Wrestrict, a false positive) on
    // `"literal" + std::string&&` here.
    out.append("transport from rank ").append(std::to_string(c.rank())).append(":");
    for (int peer = 0; peer < c.nranks(); ++peer) {
      if (peer == c.rank()) continue;
      out.append(" ").append(std::to_string(peer)).append("=").append(c.transports().to(peer));
    }
    std::string counters = c.transports().counters();
    if (!counters.empty()) out += "\n" + counters;
    if (needed != nullptr) *needed = out.size() + 1;
    if (size > 0) {
      size_t n = std::min(out.size(), size - 1);
      std::memcpy(text, out.data(), n);
      text[n] = '\0';
    }
    return loomSuccess;
  });
}

}  // extern "C"
