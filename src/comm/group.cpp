#include "comm/group.hpp"

#include <cstring>

#include "base/error.hpp"

namespace loom {

Group::Group(GroupSetup setup)
    : members_(std::move(setup.members)),
      rank_(setup.rank),
      checker_(setup.rank, static_cast<int>(members_.size()), setup.checkMode),
      algo_(setup.algo) {
  const int n = size();
  checked_.resize(n);
  channels_.assign(n, nullptr);
  for (int i = 0; i < n; ++i) {
    Channel* raw = setup.channels[members_[i]];
    if (i == rank_ || raw == nullptr) continue;
    checked_[i] = checker_.wrap(*raw);
    channels_[i] = checked_[i].get();
  }
  inputs_.nranks = n;
  inputs_.sharedMemory = setup.arena != nullptr;
  inputs_.nodesShared = setup.nodesShared;
  inputs_.directMaxBytes = setup.directMaxBytes;
  inputs_.device = setup.deviceName;
  if (!setup.awaitsNative) selector_ = std::make_unique<Selector>(inputs_, algo_);

  ctx_.rank = rank_;
  ctx_.nranks = n;
  ctx_.device = setup.device;
  ctx_.arena = setup.arena;
  ctx_.peers = setup.corePeers;
  ctx_.besideWait = setup.besideWait;
  ctx_.channels = &channels_;
  // Waits name the communicator's ranks: the group's are translated.
  std::function<void(int)> check = std::move(setup.check);
  const std::vector<int>& members = members_;
  ctx_.check = [check, &members](int peer) { check(peer < 0 ? -1 : members[peer]); };
  ctx_.callCheck = &checker_.state();
  ctx_.mismatch = [this](const std::vector<std::optional<CallSignature>>& seen) {
    checker_.throwArenaMismatch(seen);
  };
  workspace_.attach(ctx_, n);
  ctx_.streamingMinBytes = setup.streamingMinBytes;
  ctx_.hierarchy = setup.hierarchy;
  ctx_.observer = setup.observer;
  hostCtx_ = ctx_;
  hostCtx_.device = setup.hostDevice;
}

void Group::attachNative(std::unique_ptr<NativeCollectives> native) {
  native_ = std::move(native);
  if (!native_) {
    selector_ = std::make_unique<Selector>(inputs_, algo_);
    return;
  }
  nativeAlgorithms_ = nativeAlgorithms(*native_);
  inputs_.native = &nativeAlgorithms_;
  inputs_.nativeRows = native_->selectorRows();
  selector_ = std::make_unique<Selector>(inputs_, algo_);
  ctx_.native = hostCtx_.native = native_.get();
  checker_.disableSignatures();
}

void Group::attachArena(ShmArena arena) {
  ownArena_ = std::move(arena);
  ctx_.arena = hostCtx_.arena = &ownArena_;
  inputs_.sharedMemory = true;
  selector_ = std::make_unique<Selector>(inputs_, algo_);
}

namespace {

// Builds the exchange of one `width`-byte item per member: input item to every other member,
// theirs into output at their index.
void buildItemExchange(const AlgoContext& ctx, uint64_t width, Schedule& s) {
  for (int p = 0; p < ctx.nranks; ++p) {
    if (p == ctx.rank) continue;
    s.send(p, s.input(), width);
    s.recv(p, s.output(p * width), width);
  }
}

}  // namespace

std::vector<std::string> Group::allGather(const std::string& mine) {
  const int n = size();
  std::vector<std::string> all(n);
  all[rank_] = mine;
  if (n == 1) return all;
  // Lengths first, then every member's bytes (each as long as the longest, so one schedule).
  uint64_t length = mine.size();
  std::vector<uint64_t> lengths(n);
  Schedule& s = *ctx_.schedule;
  s.clear(n);
  s.setExtents(sizeof(length), n * sizeof(length));
  buildItemExchange(ctx_, sizeof(length), s);
  s.finish();
  runBuilt(ctx_, &length, lengths.data());
  lengths[rank_] = length;
  uint64_t width = 8;
  for (uint64_t l : lengths) width = std::max(width, (l + 7) & ~uint64_t{7});
  std::vector<char> in(width, 0), out(width * n, 0);
  std::memcpy(in.data(), mine.data(), mine.size());
  s.clear(n);
  s.setExtents(width, width * n);
  buildItemExchange(ctx_, width, s);
  s.finish();
  runBuilt(ctx_, in.data(), out.data());
  for (int p = 0; p < n; ++p)
    if (p != rank_) all[p].assign(out.data() + p * width, lengths[p]);
  return all;
}

}  // namespace loom
