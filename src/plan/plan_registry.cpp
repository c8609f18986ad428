#include "plan/plan_registry.hpp"

#include <dirent.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "base/dtype.hpp"
#include "base/error.hpp"
#include "plan/plan_check.hpp"

namespace loom {

namespace {

constexpr size_t kMaxPlanFileBytes = 64u << 20;

std::string readPlanFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file)
    LOOM_THROW(loomInvalidArgument, "cannot read plan file '", path,
               "' (pass JSON text starting with '{' or the path of a readable file)");
  std::ostringstream text;
  text << file.rdbuf();
  std::string out = text.str();
  if (out.size() > kMaxPlanFileBytes)
    LOOM_THROW(loomInvalidArgument, "plan file '", path, "' is larger than 64 MiB");
  return out;
}

std::string sizeText(uint64_t bytes) {
  if (bytes == UINT64_MAX) return "any";
  if (bytes >= (1u << 20) && bytes % (1u << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  if (bytes >= 1024 && bytes % 1024 == 0) return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " B";
}

// What a call's schedule depends on besides the plan.
PlanShape shapeOf(const PlanCall& call) {
  return {call.count,
          call.elementSize,
          static_cast<uint64_t>(call.reduction.dtype),
          static_cast<uint64_t>(call.reduction.op),
          static_cast<uint64_t>(call.reduction.accum + 1),
          static_cast<uint64_t>(call.reduction.divisor),
          call.parts,
          static_cast<uint64_t>(call.inPlace)};
}

bool overlap(const void* a, size_t aBytes, const void* b, size_t bBytes) {
  const auto* x = static_cast<const char*>(a);
  const auto* y = static_cast<const char*>(b);
  return aBytes > 0 && bBytes > 0 && x < y + bBytes && y < x + aBytes;
}

}  // namespace

PlanProgram loadPlan(std::string_view jsonOrPath) {
  const size_t first = jsonOrPath.find_first_not_of(" \t\r\n");
  const bool text = first != std::string_view::npos && jsonOrPath[first] == '{';
  const std::string path = text ? std::string() : std::string(jsonOrPath);
  try {
    PlanProgram program = compilePlan(parsePlan(text ? jsonOrPath : readPlanFile(path)));
    checkPlan(program);
    return program;
  } catch (const Error& e) {
    if (text || std::string(e.what()).find(path) != std::string::npos) throw;
    throw Error(e.code(), path + ": " + e.what(), e.file(), e.line());
  }
}

std::vector<std::string> planFilesIn(const std::string& directory) {
  std::unique_ptr<DIR, int (*)(DIR*)> dir(opendir(directory.c_str()), closedir);
  if (!dir) LOOM_THROW(loomInvalidArgument, "LOOM_PLAN_DIR='", directory, "' cannot be read");
  std::vector<std::string> files;
  while (const dirent* entry = readdir(dir.get())) {
    const std::string name = entry->d_name;
    if (name.size() > 5 && name.compare(name.size() - 5, 5, ".json") == 0)
      files.push_back(directory + "/" + name);
  }
  std::sort(files.begin(), files.end());
  return files;
}

PlanEntry& PlanRegistry::add(PlanProgram program, std::string source) {
  const Plan& plan = program.plan;
  LOOM_CHECK_ARG(plan.nranks == nranks_, "plan '", plan.name, "' (", source, ") is for ",
                 plan.nranks, " ranks but this communicator has ", nranks_);
  for (const auto& known : entries_) {
    if (known->program.plan.name != plan.name) continue;
    LOOM_CHECK_ARG(known->program.hash == program.hash, "a different plan named '", plan.name,
                   "' is already registered (from ", known->source, ")");
    return *known;
  }
  auto entry = std::make_unique<PlanEntry>();
  entry->algorithmName = "plan:" + plan.name;
  entry->source = std::move(source);
  entry->program = std::move(program);
  PlanEntry* raw = entry.get();
  entry->algorithm = Algorithm{plan.func, nullptr, nullptr, false};
  entry->algorithm.name = raw->algorithmName.c_str();
  entry->algorithm.runWith = [raw](const AlgoContext& ctx, const CollArgs& args) {
    runPlan(*raw, ctx, args);
  };
  entries_.push_back(std::move(entry));
  return *raw;
}

const PlanEntry* PlanRegistry::find(const std::string& name) const {
  for (const auto& e : entries_)
    if (e->program.plan.name == name) return e.get();
  return nullptr;
}

std::string describePlan(const Plan& plan) {
  std::ostringstream out;
  out << funcName(plan.func) << " on " << plan.nranks << " ranks, " << sizeText(plan.minBytes)
      << " - " << sizeText(plan.maxBytes) << ", " << plan.chunksPerBlock << " chunk"
      << (plan.chunksPerBlock == 1 ? "" : "s") << " a block";
  if (plan.scratchChunks > 0) out << ", " << plan.scratchChunks << " scratch chunks";
  if (plan.partBytes > 0)
    out << ", pipelined by " << sizeText(plan.partBytes) << " (at most " << plan.maxParts
        << " parts)";
  size_t ops = 0;
  for (const PlanRank& r : plan.ranks) ops += r.ops.size();
  out << ", " << ops << " operations";
  return out.str();
}

std::string PlanRegistry::describe() const {
  std::ostringstream out;
  for (const auto& e : entries_)
    out << e->algorithmName << ": " << describePlan(e->program.plan) << ", hash " << e->program.hash
        << " (" << e->source << ")\n";
  return out.str();
}

void runPlan(PlanEntry& entry, const AlgoContext& ctx, const CollArgs& args) {
  const Plan& plan = entry.program.plan;
  LOOM_CHECK_INTERNAL(ctx.nranks == plan.nranks, "plan '", plan.name, "' run on ", ctx.nranks,
                      " ranks");
  PlanCall call;
  call.count = args.count;
  call.elementSize = dtypeSize(args.dtype);
  call.reduction = {args.dtype, kernelOp(args.op), args.accum, averageDivisor(args.op, ctx.nranks)};
  call.parts = planParts(plan, args.count, call.elementSize);
  const CallExtents extents = callExtents(args, ctx.rank, ctx.nranks);
  if (args.send == args.recv && args.func == loomFuncAllReduce)
    call.inPlace = PlanCall::InPlace::kAliased;
  else if (overlap(args.send, extents.sendBytes, args.recv, extents.recvBytes))
    call.inPlace = PlanCall::InPlace::kCopy;
  // Native collectives take device memory: a plan they did not load must not reach here.
  LOOM_CHECK_INTERNAL(entry.nativePlan >= 0 || ctx.native == nullptr, "plan '", plan.name,
                      "' was not loaded into this communicator's native collectives");
  if (entry.nativePlan >= 0) {
    NativePlanCall native;
    native.parts = call.parts;
    native.inPlace = call.inPlace == PlanCall::InPlace::kAliased ? NativePlanCall::InPlace::kAliased
                     : call.inPlace == PlanCall::InPlace::kCopy  ? NativePlanCall::InPlace::kCopy
                                                                 : NativePlanCall::InPlace::kNo;
    ctx.native->runPlan(entry.nativePlan, args, native);
    return;
  }
  std::lock_guard<std::mutex> lock(entry.mutex);
  const PlanShape shape = shapeOf(call);
  if (shape != entry.shape || entry.schedule.empty()) {
    Schedule& s = entry.schedule;
    s.clear(ctx.nranks);
    s.setExtents(extents.sendBytes, extents.recvBytes);
    buildPlanSchedule(entry.program, ctx.rank, call, s);
    s.finish();
    entry.shape = shape;
  }
  runBuiltSchedule(ctx, entry.schedule, args.send, args.recv);
}

}  // namespace loom
