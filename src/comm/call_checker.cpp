#include "comm/call_checker.hpp"

#include <algorithm>
#include <sstream>

#include "algorithms/context.hpp"
#include "base/dtype.hpp"
#include "base/error.hpp"
#include "transport/checked_channel.hpp"

namespace loom {

namespace {

bool hasOp(loomFunc_t f) {
  return f == loomFuncAllReduce || f == loomFuncReduce || f == loomFuncReduceScatter;
}
bool hasRoot(loomFunc_t f) {
  return f == loomFuncBroadcast || f == loomFuncReduce || f == loomFuncGather ||
         f == loomFuncScatter;
}

struct Shape {
  loomFunc_t func;
  loomDataType_t dtype;
  loomRedOp_t op;
  int accum;
  int root;
};
Shape unpack(uint64_t shape) {
  return {static_cast<loomFunc_t>(shape & 0xff), static_cast<loomDataType_t>((shape >> 8) & 0xff),
          static_cast<loomRedOp_t>((shape >> 16) & 0xff),
          static_cast<int>((shape >> 24) & 0xff) - 1,
          static_cast<int>(static_cast<uint32_t>(shape >> 32))};
}

std::string describe(const CallSignature& s) {
  Shape p = unpack(s.shape);
  std::ostringstream out;
  out << funcName(p.func) << "(count=" << s.count << ", " << dtypeName(p.dtype);
  if (hasOp(p.func)) out << ", " << opName(p.op);
  if (hasRoot(p.func)) out << ", root=" << p.root;
  if (p.accum >= 0) out << ", accum=" << dtypeName(static_cast<loomDataType_t>(p.accum));
  out << ")";
  return out.str();
}

// What differs between two signatures, in the user's words.
std::string differences(const CallSignature& a, const CallSignature& b) {
  Shape x = unpack(a.shape), y = unpack(b.shape);
  std::vector<const char*> what;
  if (a.seq != b.seq) what.push_back("call number (a rank skipped or added a collective)");
  if (x.func != y.func) what.push_back("collective");
  if (a.count != b.count) what.push_back("count");
  if (x.dtype != y.dtype) what.push_back("dtype");
  if (x.op != y.op) what.push_back("op");
  if (x.root != y.root) what.push_back("root");
  if (x.accum != y.accum) what.push_back("accumulation type");
  std::string out;
  for (const char* w : what) out += (out.empty() ? "" : ", ") + std::string(w);
  return out;
}

}  // namespace

std::string describeCall(const CollArgs& a) {
  std::ostringstream out;
  out << funcName(a.func) << "(count=" << a.count << ", " << dtypeName(a.dtype);
  if (hasOp(a.func)) out << ", " << opName(a.op);
  if (hasRoot(a.func)) out << ", root=" << a.root;
  out << ")";
  return out.str();
}

CallChecker::CallChecker(int rank, int nranks, int64_t mode)
    : rank_(rank), nranks_(nranks), mode_(mode) {
  state_.enabled = mode >= 1;
}

void CallChecker::begin(const CollArgs& a, int accum) {
  ++calls_;
  state_.previous = state_.mine;
  CallSignature& s = state_.mine;
  s.seq = calls_;
  s.count = a.count;
  s.shape = static_cast<uint64_t>(a.func) | static_cast<uint64_t>(a.dtype) << 8 |
            static_cast<uint64_t>(hasOp(a.func) ? a.op : 0) << 16 |
            static_cast<uint64_t>(accum + 1) << 24 |
            static_cast<uint64_t>(static_cast<uint32_t>(hasRoot(a.func) ? a.root : 0)) << 32;
  state_.minePacked = pack(s);
  state_.mineHash = state_.enabled ? hash24(state_.minePacked) : 0;
}

void CallChecker::throwMismatch(const std::vector<std::optional<CallSignature>>& seen,
                                const CallSignature& mine, const char* note) const {
  // Ranks grouped by what they called, in rank order: the same text on every rank that saw the
  // same signatures.
  std::ostringstream msg;
  msg << kMismatchMessage << " in collective #" << mine.seq << note << ":";
  std::vector<bool> listed(seen.size(), false);
  const CallSignature* other = nullptr;
  for (size_t i = 0; i < seen.size(); ++i) {
    if (listed[i] || !seen[i]) continue;
    msg << " ranks";
    for (size_t j = i; j < seen.size(); ++j)
      if (seen[j] && *seen[j] == *seen[i]) listed[j] = true, msg << (j == i ? " " : ",") << j;
    msg << " called " << describe(*seen[i]) << ";";
    if (!(*seen[i] == mine) && other == nullptr) other = &*seen[i];
  }
  std::ostringstream unseen;  // (a stream: GCC 12 warns falsely on the string + form here)
  for (size_t r = 0; r < seen.size(); ++r)
    if (!seen[r]) unseen << (unseen.tellp() > 0 ? "," : "") << r;
  if (unseen.tellp() > 0) msg << " (ranks " << unseen.str() << " not seen by rank " << rank_ << ")";
  if (other != nullptr) msg << " they differ in " << differences(mine, *other);
  LOOM_THROW(loomInvalidUsage, msg.str());
}

void CallChecker::throwArenaMismatch(const std::vector<std::optional<CallSignature>>& seen) const {
  // The step may be one of an earlier call, where this rank did not wait for everyone.
  const CallSignature& mine = seen[rank_] ? *seen[rank_] : state_.mine;
  throwMismatch(seen, mine, mine.seq == state_.mine.seq ? "" : " (found at a later collective)");
}

std::unique_ptr<Channel> CallChecker::wrap(Channel& inner) {
  return std::make_unique<CheckedChannel>(
      inner, state_, [this](int peer, const CallSignature& theirs) {
        // What the peer sent in the previous call, untaken: that call is the one that differed
        // (this rank returned from it: it only sent).
        const bool late = theirs.seq + 1 == state_.mine.seq;
        const CallSignature& mine = late ? state_.previous : state_.mine;
        std::vector<std::optional<CallSignature>> seen(nranks_);
        seen[rank_] = mine;
        seen[peer] = theirs;
        throwMismatch(seen, mine, late ? " (found at the next collective)" : "");
      });
}

void CallChecker::verify(
    const std::string& description,
    const std::function<std::vector<std::string>(const std::string&)>& allGather) const {
  std::vector<std::string> all = allGather(description);
  if (std::all_of(all.begin(), all.end(), [&](const std::string& s) { return s == all[0]; }))
    return;
  std::ostringstream msg;
  msg << "LOOM_CHECK: collective #" << calls_ << " differs across ranks:";
  std::vector<bool> listed(all.size(), false);
  for (size_t i = 0; i < all.size(); ++i) {
    if (listed[i]) continue;
    msg << " ranks";
    for (size_t j = i; j < all.size(); ++j)
      if (all[j] == all[i]) listed[j] = true, msg << (j == i ? " " : ",") << j;
    msg << " called " << all[i] << ";";
  }
  LOOM_THROW(loomInvalidUsage, msg.str());
}

}  // namespace loom
