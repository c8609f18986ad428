// A communicator's execution plans (docs/plans.md): LOOM_PLAN_DIR's at init, loomCommRegisterPlan
// later, the selector callback. A plan is a host algorithm: it runs wherever the host algorithms
// do, on host communicators as it is, on device ranks without native collectives (plug-ins, a
// heterogeneous communicator's device ranks) staged through host memory like any host algorithm
// (comm/device_calls.cpp), in chunks where a heterogeneous communicator cuts its calls. On
// communicators with native collectives (CUDA) the backend runs it (NativeCollectives::loadPlan:
// a GPU kernel that interprets it), or refuses it on every rank alike. A registration is
// collective so that every rank runs the same plans.
#include <cstring>
#include <optional>
#include <sstream>

#include "base/env.hpp"
#include "base/log.hpp"
#include "comm/comm.hpp"
#include "plan/plan_native.hpp"

namespace loom {

namespace {

// What one rank contributes to a registration's exchange: the plan's hash, or a refusal.
struct PlanVote {
  uint64_t hash = 0;
  uint64_t refused = 0;
};

uint64_t hashWord(const std::string& hex) { return std::stoull(hex.substr(0, 16), nullptr, 16); }

}  // namespace

std::string Comm::deviceKind() const {
  return composition_.hetero ? std::string("heterogeneous") : device_->identity().kind;
}

bool Comm::runsPlans() const { return native() == nullptr || native()->runsPlans(); }

std::string Comm::whyNoPlans() const {
  return "execution plans do not run on this " + deviceKind() +
         " communicator: its collectives are the device's native ones, which do not interpret "
         "plans; plans run on host communicators, on CUDA communicators and on device ranks "
         "without native collectives (plug-ins, heterogeneous communicators), staged through "
         "host memory";
}

int Comm::loadNativePlan(const PlanProgram& program) {
  if (native() == nullptr) return -1;
  std::string why;
  const int index = native()->loadPlan(nativePlanOf(program, rank_), why);
  LOOM_CHECK_ARG(index >= 0, why);
  return index;
}

std::string Comm::loadPlanDir() {
  plans_ = std::make_unique<PlanRegistry>(nranks_);
  const std::string dir = env::planDir();
  if (dir.empty()) return "";
  std::string settings = " LOOM_PLAN_DIR:";
  for (const std::string& file : planFilesIn(dir)) {
    PlanProgram program = loadPlan(file);
    if (program.plan.nranks != nranks_) {
      LOOM_INFO(kSubsysInit, rank_, "plan '", program.plan.name, "' (", file, ") is for ",
                program.plan.nranks, " ranks: not for this communicator of ", nranks_);
      continue;
    }
    settings += " " + program.plan.name + "=" + program.hash;
    plans_->add(std::move(program), file);
  }
  return settings;
}

void Comm::selectPlans() {
  if (plans_->entries().empty()) return;
  if (!runsPlans()) {
    LOOM_INFO(kSubsysInit, rank_, whyNoPlans(), ": ", plans_->entries().size(),
              " plan(s) of LOOM_PLAN_DIR not used");
    return;
  }
  for (const auto& e : plans_->entries()) {
    const Plan& plan = e->program.plan;
    try {
      e->nativePlan = loadNativePlan(e->program);
    } catch (const Error& error) {
      // A refusal is the same on every rank (it depends on the whole plan and on what all ranks
      // agreed at init), so every rank leaves the plan out; anything else (a CUDA error of one
      // rank) fails the init rather than leave the ranks choosing differently.
      if (error.code() != loomInvalidArgument) throw;
      LOOM_INFO(kSubsysInit, rank_, "plan '", plan.name,
                "' of LOOM_PLAN_DIR not used: ", error.what());
      continue;
    }
    main_->selector().addPlan(&e->algorithm, plan.minBytes, plan.maxBytes);
  }
  if (rank_ == 0) LOOM_INFO(kSubsysTune, rank_, "execution plans:\n", plans_->describe());
}

const std::string& Comm::registerPlan(const std::string& jsonOrPath) {
  // Every rank of a communicator has native collectives or none (a heterogeneous one has none:
  // its device ranks run the host algorithms), so all refuse here alike, before any exchange.
  LOOM_CHECK_ARG(runsPlans(), whyNoPlans());
  // Every rank loads and checks the plan, then all exchange its hash (or their refusal) in one
  // allgather, counted and checked as any collective, so that a rank that registers nothing, or
  // another plan, fails the call check or the comparison below on every rank instead of hanging.
  std::optional<PlanProgram> program;
  std::string refusal;
  int nativePlan = -1;
  try {
    program = loadPlan(jsonOrPath);
    LOOM_CHECK_ARG(program->plan.nranks == nranks_, "plan '", program->plan.name, "' is for ",
                   program->plan.nranks, " ranks but this communicator has ", nranks_);
    // The same plan registered again keeps its upload.
    const PlanEntry* known = plans_->find(program->plan.name);
    nativePlan = known != nullptr && known->program.hash == program->hash && known->nativePlan >= 0
                     ? known->nativePlan
                     : loadNativePlan(*program);
  } catch (const Error& e) {
    refusal = e.what();
  }
  PlanVote mine{program ? hashWord(program->hash) : 0, refusal.empty() ? 0u : 1u};
  std::vector<PlanVote> votes(nranks_);
  CollArgs args;
  args.func = loomFuncAllGather;
  args.send = &mine;
  args.recv = votes.data();
  args.count = sizeof(PlanVote) / sizeof(uint64_t);
  args.dtype = loomUint64;
  try {
    const Algorithm& allGather = main_->selector().builtIn(args.func, sizeof(PlanVote));
    if (native() != nullptr) {
      // Native collectives take device memory only: the votes go through device scratch, as a
      // device rank's host buffers do (and the call returns once they are back here).
      collectiveThroughDevice(args, &allGather);
    } else {
      // The votes are host memory: the host algorithm runs on them on the host CPU, on a device
      // rank too (after its queued stream-ordered calls, which use the same channels).
      runCall(&args, [&] { runAlgorithm(allGather, main_->hostCtx(), args); });
    }
  } catch (const Error& e) {
    // A rank that registers nothing meets this allgather with another call: say which.
    throw Error(
        e.code(),
        "registering a plan (an allgather of its hash on every rank): " + std::string(e.what()),
        e.file(), e.line());
  }
  std::ostringstream refused, differ;
  for (int r = 0; r < nranks_; ++r) {
    if (votes[r].refused != 0) refused << (refused.tellp() > 0 ? ", " : "") << r;
    if (votes[r].hash != votes[0].hash) differ << (differ.tellp() > 0 ? ", " : "") << r;
  }
  if (!refusal.empty()) LOOM_THROW(loomInvalidArgument, refusal);
  LOOM_CHECK_ARG(refused.tellp() == 0, "plan '", program->plan.name, "' was refused on rank(s) ",
                 refused.str(), " (their error says why); it is registered on no rank");
  LOOM_CHECK_ARG(differ.tellp() == 0, "ranks register different plans: rank(s) ", differ.str(),
                 " passed another plan than rank 0 (this rank's: '", program->plan.name, "', hash ",
                 program->hash, "); it is registered on no rank");
  const std::string source = jsonOrPath.find('{') == std::string::npos ? jsonOrPath : "text";
  PlanEntry& entry = plans_->add(std::move(*program), source);
  if (entry.nativePlan < 0) entry.nativePlan = nativePlan;
  main_->selector().addPlan(&entry.algorithm, entry.program.plan.minBytes,
                            entry.program.plan.maxBytes);
  LOOM_INFO(kSubsysTune, rank_, "registered ", entry.algorithmName, ": ",
            describePlan(entry.program.plan), ", hash ", entry.program.hash);
  return entry.algorithmName;
}

void Comm::setPlanSelector(Selector::Callback callback) {
  LOOM_CHECK_ARG(runsPlans(), whyNoPlans());
  main_->selector().setCallback(std::move(callback));
}

std::string Comm::describePlans() const { return plans_ ? plans_->describe() : std::string(); }

}  // namespace loom
