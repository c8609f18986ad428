// C entry points of execution plans (include/loom/loom.h, docs/plans.md).
#include <cstring>
#include <string>

#include "api/handle.hpp"
#include "loom/loom.h"
#include "plan/plan_registry.hpp"

using namespace loom;

namespace {

void copyText(const std::string& out, char* text, size_t size, size_t* needed) {
  if (needed != nullptr) *needed = out.size() + 1;
  if (size > 0) {
    const size_t n = std::min(out.size(), size - 1);
    std::memcpy(text, out.data(), n);
    text[n] = '\0';
  }
}

}  // namespace

extern "C" {

loomResult_t loomCommRegisterPlan(loomComm_t comm, const char* jsonOrPath, const char** algorithm) {
  return guarded("loomCommRegisterPlan", [&] {
    LOOM_CHECK_ARG(jsonOrPath != nullptr, "jsonOrPath is NULL");
    if (algorithm != nullptr) *algorithm = nullptr;
    HandleUse use(comm);
    const std::string& name = use.comm().registerPlan(jsonOrPath);
    if (algorithm != nullptr) *algorithm = name.c_str();
    return loomSuccess;
  });
}

loomResult_t loomCommSetPlanSelector(loomComm_t comm, loomPlanSelector_t selector, void* user) {
  return guarded("loomCommSetPlanSelector", [&] {
    HandleUse use(comm);
    const int nranks = use.comm().nranks();
    Selector::Callback callback;
    if (selector != nullptr)
      callback = [selector, user, nranks](loomFunc_t func, size_t bytes) {
        const char* name = selector(func, bytes, nranks, user);
        return std::string(name != nullptr ? name : "");
      };
    use.comm().setPlanSelector(std::move(callback));
    return loomSuccess;
  });
}

loomResult_t loomCommDescribePlans(const loomComm_t comm, char* text, size_t size, size_t* needed) {
  return guarded("loomCommDescribePlans", [&] {
    LOOM_CHECK_ARG(text != nullptr || size == 0, "text is NULL but size is ", size);
    HandleUse use(comm);
    copyText(use.comm().describePlans(), text, size, needed);
    return loomSuccess;
  });
}

loomResult_t loomPlanCheck(const char* jsonOrPath, char* text, size_t size, size_t* needed) {
  return guarded("loomPlanCheck", [&] {
    LOOM_CHECK_ARG(jsonOrPath != nullptr, "jsonOrPath is NULL");
    LOOM_CHECK_ARG(text != nullptr || size == 0, "text is NULL but size is ", size);
    const PlanProgram program = loadPlan(jsonOrPath);
    copyText(
        "plan:" + program.plan.name + ": " + describePlan(program.plan) + ", hash " + program.hash,
        text, size, needed);
    return loomSuccess;
  });
}

}  // extern "C"
