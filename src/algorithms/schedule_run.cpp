// Running a built schedule with a communicator's executor: the glue between an algorithm's
// context and the executor's environment.
#include <algorithm>

#include "algorithms/context.hpp"
#include "algorithms/ring_steps.hpp"
#include "base/coll_args.hpp"
#include "base/log.hpp"

namespace loom {

namespace {

constexpr uint64_t kScratchAlign = 64;

uint64_t aligned(uint64_t bytes) { return (bytes + kScratchAlign - 1) & ~(kScratchAlign - 1); }

}  // namespace

void AlgoWorkspace::attach(AlgoContext& ctx, int nranks) {
  sources.resize(nranks);
  ringSteps.reserve(2 * nranks);
  ctx.scratch = &scratch;
  ctx.sources = &sources;
  ctx.ringSteps = &ringSteps;
  ctx.opList = &opList;
  ctx.refList = &refList;
  ctx.schedule = &schedule;
  ctx.builtCall = &builtCall;
  ctx.executor = &executor;
  ctx.bindings = &bindings;
  ctx.pollSet = &pollSet;
  ctx.step = &step;
  ctx.alongside = &alongside;
  ctx.threadedRun = &threadedRun;
}

void runBuilt(const AlgoContext& ctx, const void* input, void* output) {
  runBuiltSchedule(ctx, *ctx.schedule, input, output);
}

ExecEnv bindSchedule(const AlgoContext& ctx, const Schedule& s, const void* input, void* output) {
  const std::vector<ScheduleBuffer>& buffers = s.buffers();
  uint64_t scratch = 0;
  for (size_t b = 2; b < buffers.size(); ++b) scratch += aligned(buffers[b].bytes);
  char* base = scratch > 0 ? ctx.scratchBytes(scratch) : nullptr;
  std::vector<char*>& bind = *ctx.bindings;
  bind.clear();
  bind.push_back(static_cast<char*>(const_cast<void*>(input)));
  bind.push_back(static_cast<char*>(output));
  for (size_t b = 2; b < buffers.size(); ++b) {
    bind.push_back(base);
    base += aligned(buffers[b].bytes);
  }
  ExecEnv env;
  env.device = ctx.device;
  env.channels = std::span<Channel* const>(ctx.channels->data(), ctx.channels->size());
  env.check = &ctx.check;
  env.pollSet = ctx.pollSet;
  env.corePeers = ctx.peers;
  env.streamingMinBytes = ctx.streamingMinBytes;
  env.observer = ctx.observer;
  // LOOM_DEBUG=TRACE with LOOM_DEBUG_SUBSYS=COLL: what the executor runs, op by op (the text is
  // built only then).
  LOOM_TRACE(kSubsysColl, ctx.rank, s.describe());
  return env;
}

void runBuiltSchedule(const AlgoContext& ctx, const Schedule& s, const void* input, void* output) {
  const ExecEnv env = bindSchedule(ctx, s, input, output);
  ctx.executor->run(s, std::span<char* const>(ctx.bindings->data(), ctx.bindings->size()), env);
}

namespace {

BuiltCall builtCallOf(const AlgoContext& ctx, const CollArgs& a, ScheduleFn build) {
  BuiltCall call;
  call.build = build;
  call.channels = ctx.channels;
  call.rank = ctx.rank;
  call.func = a.func;
  call.count = a.count;
  call.dtype = a.dtype;
  call.op = a.op;
  call.root = a.root;
  call.accum = a.accum;
  call.hasSend = a.send != nullptr;
  call.hasRecv = a.recv != nullptr;
  call.sendMinusRecv = reinterpret_cast<uintptr_t>(a.send) - reinterpret_cast<uintptr_t>(a.recv);
  call.stream = a.stream;
  return call;
}

}  // namespace

void buildSchedule(const AlgoContext& ctx, const CollArgs& args, ScheduleFn build) {
  Schedule& s = *ctx.schedule;
  const bool keep =
      ctx.builtCall != nullptr && args.sendCounts == nullptr && args.recvCounts == nullptr;
  BuiltCall call;
  if (keep) {
    call = builtCallOf(ctx, args, build);
    call.generation = s.generation();
    if (s.finished() && call == *ctx.builtCall) return;  // built for a call like this one
  }
  s.clear(static_cast<int>(ctx.channels->size()));
  const CallExtents extents = callExtents(args, ctx.rank, ctx.nranks);
  s.setExtents(extents.sendBytes, extents.recvBytes);
  build(ctx, args, s);
  s.finish();
  if (keep) {
    call.generation = s.generation();
    *ctx.builtCall = call;
  }
}

void runSchedule(const AlgoContext& ctx, const CollArgs& args, ScheduleFn build) {
  buildSchedule(ctx, args, build);
  runBuilt(ctx, args.send, args.recv);
}

AlongsideRun::AlongsideRun(const AlgoContext& ctx, const AlgoContext& beside, const Schedule& s,
                           const void* input, void* output, std::optional<bool> onThread)
    : executor_(*ctx.executor),
      env_(bindSchedule(ctx, s, input, output)),
      slot_(*beside.alongside),
      waiter_(beside.peers) {
  executor_.begin(s, std::span<char* const>(ctx.bindings->data(), ctx.bindings->size()), env_);
  const std::vector<ScheduleBuffer>& buffers = s.buffers();
  const uint64_t bytes =
      std::max(buffers[Schedule::kInput].bytes, buffers[Schedule::kOutput].bytes);
  if (ctx.threadedRun != nullptr && onThread.value_or(beside.threadsBeside(bytes)))
    thread_ = startOnThread(ctx, s);
  if (thread_ != nullptr)
    slot_.thread = thread_;
  else
    slot_.work = &executor_.progress();
}

ThreadedRun* AlongsideRun::startOnThread(const AlgoContext& ctx, const Schedule& s) {
  try {
    if (!*ctx.threadedRun) *ctx.threadedRun = std::make_unique<ThreadedRun>();  // once
    ThreadedRun* thread = ctx.threadedRun->get();
    // Nothing else of ctx waits during the run: its poll set is the thread's.
    thread->start(executor_, s.ops().size(), *ctx.pollSet);
    return thread;
  } catch (const std::exception& e) {
    LOOM_WARN(kSubsysColl, ctx.rank,
              "the work beside the arena moves in the calling thread: ", e.what());
    return nullptr;
  }
}

AlongsideRun::~AlongsideRun() {
  if (thread_ != nullptr) thread_->abandon();
  slot_.work = nullptr;
  slot_.thread = nullptr;
}

void AlongsideRun::open(uint32_t gate) {
  if (thread_ != nullptr)
    thread_->open(gate);
  else
    executor_.open(gate);
}

void AlongsideRun::waitFor(uint32_t op) {
  if (op == kNoOp) return;
  if (thread_ != nullptr)
    thread_->waitFor(op, waiter_);
  else
    executor_.driveUntilDone(op);
}

void AlongsideRun::finish() {
  if (thread_ != nullptr)
    thread_->finish(waiter_);
  else
    executor_.finish();
}

}  // namespace loom
