// Every example plan of loom.plan (written by write_examples.py into $LOOM_TEST_PLAN_DIR, fused
// and unfused, 1-8 ranks) run by the executor with ranks as threads over small bounded channels,
// bit-exact with a reference computed here: several types and operations, odd sizes, several
// pipeline parts, in place. Values are small integers, so every summation order gives the same
// bits (the plans add in ring or rank order, the reference in rank order).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <thread>

#include "../exec/memory_channel.hpp"
#include "base/dtype.hpp"
#include "base/error.hpp"
#include "device/cpu/cpu_device.hpp"
#include "exec/executor.hpp"
#include "plan/plan_registry.hpp"

namespace loom {
namespace {

struct Case {
  loomDataType_t dtype;
  loomRedOp_t op;
  uint64_t count;
  uint32_t parts;
  bool inPlace;
};

double valueOf(int rank, uint64_t i) { return static_cast<double>((rank + 1) * (i % 13) % 29); }

double combine(loomRedOp_t op, double a, double b) {
  switch (op) {
    case loomMax:
      return std::max(a, b);
    case loomMin:
      return std::min(a, b);
    case loomProd:
      return a * b;
    default:
      return a + b;
  }
}

// The expected output element `i` of rank r, as a double.
double expected(const Plan& plan, const Case& c, int r, uint64_t i) {
  const int n = plan.nranks;
  const uint64_t block = i / std::max<uint64_t>(c.count, 1),
                 within = i % std::max<uint64_t>(c.count, 1);
  switch (plan.func) {
    case loomFuncAllReduce:
    case loomFuncReduceScatter: {
      const uint64_t at = plan.func == loomFuncAllReduce ? i : r * c.count + i;
      double v = valueOf(0, at);
      for (int p = 1; p < n; ++p) v = combine(c.op, v, valueOf(p, at));
      return c.op == loomAvg ? v / n : v;
    }
    case loomFuncAllGather:
      return valueOf(static_cast<int>(block), within);
    default:
      return valueOf(static_cast<int>(block), r * c.count + within);
  }
}

std::vector<char> encode(loomDataType_t dtype, const std::vector<double>& values) {
  std::vector<char> out(values.size() * dtypeSize(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    char* at = out.data() + i * dtypeSize(dtype);
    switch (dtype) {
      case loomInt32: {
        const int32_t v = static_cast<int32_t>(values[i]);
        std::memcpy(at, &v, 4);
        break;
      }
      case loomFloat32: {
        const float v = static_cast<float>(values[i]);
        std::memcpy(at, &v, 4);
        break;
      }
      case loomBfloat16: {
        const uint16_t v = floatToBf16(static_cast<float>(values[i]));
        std::memcpy(at, &v, 2);
        break;
      }
      default: {
        std::memcpy(at, &values[i], 8);
        break;
      }
    }
  }
  return out;
}

void runCase(const PlanProgram& program, const Case& c, const std::string& label) {
  const Plan& plan = program.plan;
  const int n = plan.nranks;
  const size_t esize = dtypeSize(c.dtype);
  auto owned = test::memoryChannels(n, 256);
  std::unique_ptr<Device> cpu = createCpuDevice();
  std::vector<Schedule> schedules(n);
  std::vector<std::vector<char>> out(n), in(n), scratch(n);
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    std::vector<double> values(plan.inputBlocks() * c.count);
    for (uint64_t i = 0; i < values.size(); ++i) values[i] = valueOf(r, i);
    in[r] = encode(c.dtype, values);
    out[r].assign(plan.outputBlocks() * c.count * esize, 0x11);
    if (c.inPlace) out[r] = in[r];
    PlanCall call;
    call.count = c.count;
    call.elementSize = esize;
    call.reduction = {c.dtype, kernelOp(c.op), -1, averageDivisor(c.op, n)};
    call.parts = c.parts;
    call.inPlace = !c.inPlace                                      ? PlanCall::InPlace::kNo
                   : plan.func == loomFuncAllReduce && c.parts > 1 ? PlanCall::InPlace::kAliased
                                                                   : PlanCall::InPlace::kCopy;
    Schedule& s = schedules[r];
    s.clear(n);
    s.setExtents(in[r].size(), out[r].size());
    buildPlanSchedule(program, r, call, s);
    s.finish();
  }
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      const Schedule& s = schedules[r];
      uint64_t scratchBytes = 0;
      for (size_t b = 2; b < s.buffers().size(); ++b) scratchBytes += s.buffers()[b].bytes;
      scratch[r].assign(scratchBytes, 0x22);
      std::vector<char*> bufs = {c.inPlace ? out[r].data() : in[r].data(), out[r].data()};
      char* next = scratch[r].data();
      for (size_t b = 2; b < s.buffers().size(); ++b) {
        bufs.push_back(next);
        next += s.buffers()[b].bytes;
      }
      std::vector<Channel*> channels;
      for (auto& ch : owned[r]) channels.push_back(ch.get());
      std::function<void(int)> check = [](int) {};
      PollSet pollSet;
      ExecEnv env;
      env.device = cpu.get();
      env.channels = channels;
      env.check = &check;
      env.pollSet = &pollSet;
      Executor executor;
      try {
        executor.run(s, bufs, env);
      } catch (const Error& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(errors[r], "") << label;
    std::vector<double> want(plan.outputBlocks() * c.count);
    for (uint64_t i = 0; i < want.size(); ++i) want[i] = expected(plan, c, r, i);
    const std::vector<char> bytes = encode(c.dtype, want);
    ASSERT_EQ(out[r].size(), bytes.size());
    for (size_t b = 0; b < bytes.size(); ++b)
      ASSERT_EQ(out[r][b], bytes[b]) << label << " rank " << r << " element " << b / esize;
  }
}

TEST(PlanExamples, EveryExampleIsBitExactOnTheExecutor) {
  const char* dir = std::getenv("LOOM_TEST_PLAN_DIR");
  if (dir == nullptr) GTEST_SKIP() << "LOOM_TEST_PLAN_DIR not set (ctest sets it)";
  int plans = 0;
  for (const char* variant : {"fused", "unfused"}) {
    for (const std::string& file : planFilesIn(std::string(dir) + "/" + variant)) {
      const PlanProgram program = loadPlan(file);
      const bool reduces =
          program.plan.func == loomFuncAllReduce || program.plan.func == loomFuncReduceScatter;
      std::vector<Case> cases = {{loomFloat32, loomSum, 1001, 1, false},
                                 {loomInt32, loomMax, 7, 3, false},
                                 {loomBfloat16, loomSum, 333, 2, false},
                                 {loomFloat64, loomAvg, 4099, 1, false},
                                 {loomInt32, loomSum, 0, 1, false}};
      // In place: allreduce with its aliased dependencies (2 parts here) or through a copy of
      // the input (1 part here).
      if (program.plan.func == loomFuncAllReduce) {
        cases.push_back({loomFloat32, loomSum, 515, 2, true});
        cases.push_back({loomInt32, loomSum, 515, 1, true});
      }
      for (const Case& c : cases) {
        if (!reduces && c.op != loomSum) continue;
        runCase(program, c,
                file + " " + dtypeName(c.dtype) + " " + opName(c.op) + " count " +
                    std::to_string(c.count) + " parts " + std::to_string(c.parts) +
                    (c.inPlace ? " in place" : ""));
        if (HasFatalFailure()) return;
      }
      ++plans;
    }
  }
  EXPECT_GE(plans, 90);  // 6 examples at 1-8 ranks (fewer where one needs a rank count), twice
}

}  // namespace
}  // namespace loom
