// The inits and splits called inside a group, made at its end, all together, as NCCL defers them:
// one thread may make every rank of a communicator (nccl-tests -g N: ncclGroupStart; for each GPU
// cudaSetDevice and ncclCommInitRank; ncclGroupEnd), each init waiting for all ranks.
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <thread>

#include "shim.hpp"

#if defined(LOOM_HAVE_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace loom::nccl_shim {
namespace {

struct Outcome {
  ncclResult_t code = ncclSuccess;
  std::string message;
};

Outcome failed(ncclResult_t code) { return {code, lastError()}; }

void setCudaDevice(int device) {
#if defined(LOOM_HAVE_CUDA)
  if (device >= 0 && cudaSetDevice(device) != cudaSuccess) cudaGetLastError();
#else
  (void)device;
#endif
}

// The ranks of one communicator (one unique id) the group makes: one loomCommInitRanksConfig, a
// thread per rank inside, all or nothing.
Outcome makeLoomRanks(const std::vector<const DeferredInit*>& inits) {
  const size_t n = inits.size();
  const Entry entry = inits[0]->entry;
  const int nranks = inits[0]->comm->nranks;
  std::vector<int> ranks;
  std::vector<std::string> devices(n);  // sized once: the configs point into it
  std::vector<loomConfig_t> configs(n);
  std::vector<loomConfig_t*> pointers(n);
  for (size_t i = 0; i < n; ++i) {
    const ncclComm* c = inits[i]->comm;
    count(inits[i]->entry, Route::kLoom);
    if (c->nranks != nranks)
      return {ncclInvalidArgument,
              "ncclGroupEnd: the inits of one unique id in this group give "
              "nranks " +
                  std::to_string(nranks) + " and " + std::to_string(c->nranks)};
    ranks.push_back(c->rank);
    configs[i] = loomConfigFor(c->hasConfig ? &c->config : nullptr, c->cudaDevice, &devices[i]);
    // Made here, synchronously: a non-blocking caller sees its init done at the group's end.
    configs[i].blocking = 1;
    pointers[i] = &configs[i];
  }
  loomUniqueId id;
  std::memcpy(&id, &inits[0]->id, sizeof(id));
  std::vector<loomComm_t> made(n, nullptr);
  const ncclResult_t result =
      fromLoom(entry, loomCommInitRanksConfig(made.data(), static_cast<int>(n), nranks, id,
                                              ranks.data(), pointers.data()));
  if (result != ncclSuccess) {
    for (const DeferredInit* init : inits) count(init->entry, Route::kError);
    return failed(result);
  }
  for (size_t i = 0; i < n; ++i) inits[i]->comm->loom = made[i];
  return {};
}

Outcome makeSplit(const DeferredInit& init) {
  ncclComm* c = init.comm;
  const bool placeholder = c->magic != ncclComm::kMagic;  // NCCL_SPLIT_NOCOLOR: takes part only
  ncclComm_t unused = nullptr;
  const ncclResult_t result =
      splitNow(init.entry, init.parent, init.color, init.key, c->hasConfig ? &c->config : nullptr,
               placeholder ? nullptr : c, &unused);
  return result == ncclSuccess ? Outcome{} : failed(result);
}

// LOOM_NCCL_FORCE_FALLBACK=all (and splits of communicators that are the real NCCL's): the
// real NCCL's inits and splits of the group, in one group of its own, each init on the CUDA device
// current at its call.
Outcome makeReal(const std::vector<const DeferredInit*>& inits) {
  std::string missing;
  const RealNccl* lib = realNccl(&missing);
  if (lib == nullptr) return {ncclInvalidUsage, "ncclGroupEnd: no real NCCL: " + missing};
  std::vector<ncclComm_t> real(inits.size(), nullptr);
  const int saved = currentCudaDevice();
  ncclResult_t result = ncclSuccess;
  lib->GroupStart();
  for (size_t i = 0; i < inits.size(); ++i) {
    const DeferredInit& in = *inits[i];
    ncclComm* c = in.comm;
    count(in.entry, Route::kNccl);
    ncclConfig_t* config = c->hasConfig ? &c->config : nullptr;
    ncclResult_t r = ncclSuccess;
    if (in.parent != nullptr) {
      r = lib->CommSplit(reinterpret_cast<ncclComm_t>(in.parent->real), in.color, in.key, &real[i],
                         config);
    } else {
      setCudaDevice(c->cudaDevice);
      r = config != nullptr && lib->CommInitRankConfig != nullptr
              ? lib->CommInitRankConfig(&real[i], c->nranks, in.id, c->rank, config)
              : lib->CommInitRank(&real[i], c->nranks, in.id, c->rank);
    }
    if (r != ncclSuccess && r != ncclInProgress && result == ncclSuccess)
      result = fromReal(in.entry, *lib, nullptr, r);
  }
  const ncclResult_t ended = lib->GroupEnd();
  setCudaDevice(saved);
  if (result == ncclSuccess && ended != ncclSuccess && ended != ncclInProgress)
    result = fromReal(Entry::kGroupEnd, *lib, nullptr, ended);
  if (result != ncclSuccess) {
    for (const DeferredInit* init : inits) count(init->entry, Route::kError);
    return failed(result);
  }
  for (size_t i = 0; i < inits.size(); ++i)
    if (real[i] != nullptr && inits[i]->comm->magic == ncclComm::kMagic)
      adoptReal(inits[i]->comm, *lib, real[i]);
  return {};
}

}  // namespace

ncclResult_t makeDeferred(std::vector<DeferredInit> inits) {
  // Jobs that may wait for each other's ranks (other processes join each in their own order), so
  // each runs on a thread of its own: the real NCCL's group, each unique id's ranks, each split.
  std::vector<const DeferredInit*> realOnes;
  std::map<std::string, std::vector<const DeferredInit*>> byId;
  std::vector<const DeferredInit*> splits;
  const bool whole = wholeFallback(nullptr);
  for (const DeferredInit& in : inits) {
    if (in.parent != nullptr)
      (in.parent->loom == nullptr ? realOnes : splits).push_back(&in);
    else if (whole)
      realOnes.push_back(&in);
    else
      byId[std::string(in.id.internal, sizeof(in.id.internal))].push_back(&in);
  }
  std::vector<std::function<Outcome()>> jobs;
  std::vector<std::vector<const DeferredInit*>> members;
  if (!realOnes.empty()) {
    jobs.emplace_back([&realOnes] { return makeReal(realOnes); });
    members.push_back(realOnes);
  }
  for (auto& entry : byId) {
    const std::vector<const DeferredInit*>& group = entry.second;
    jobs.emplace_back([&group] { return makeLoomRanks(group); });
    members.push_back(group);
  }
  for (const DeferredInit* split : splits) {
    jobs.emplace_back([split] { return makeSplit(*split); });
    members.push_back({split});
  }
  std::vector<Outcome> outcomes(jobs.size());
  if (jobs.size() == 1) {
    outcomes[0] = jobs[0]();
  } else {
    std::vector<std::thread> threads;
    for (size_t j = 0; j < jobs.size(); ++j)
      threads.emplace_back([&, j] { outcomes[j] = jobs[j](); });
    for (std::thread& t : threads) t.join();
  }
  ncclResult_t result = ncclSuccess;
  std::string message;
  for (size_t j = 0; j < jobs.size(); ++j) {
    const Outcome& o = outcomes[j];
    for (const DeferredInit* in : members[j]) {
      ncclComm* c = in->comm;
      if (c->magic != ncclComm::kMagic) {  // a split's NOCOLOR placeholder: done with
        delete c;
        continue;
      }
      if (o.code != ncclSuccess) c->initError = o.message;
      c->initState.store(o.code);
    }
    if (o.code != ncclSuccess && result == ncclSuccess) {
      result = o.code;
      message = o.message;
    }
  }
  if (result != ncclSuccess) setLastError("ncclGroupEnd: " + message);
  return result;
}

}  // namespace loom::nccl_shim
