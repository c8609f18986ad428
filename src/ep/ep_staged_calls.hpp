// The arrays of each call, listed for a device rank's staging (ep_staging.hpp): `host` becomes
// the call with every array it reads or writes mirrored in host memory. Called twice per call,
// once measuring and once staging. The handle's scalars are copied back by the caller.
#pragma once

#include "ep/ep_staging.hpp"
#include "ep/ep_tokens.hpp"

namespace loom::ep {

void stageDispatch(Staging& s, const Sizes& sizes, const NormalCall& call,
                   loomEpDispatchArgs_t& host, loomEpHandle_t& handle);
void stageCombine(Staging& s, const Sizes& sizes, const NormalCall& call, loomEpCombineArgs_t& host,
                  loomEpHandle_t& handle);
void stageLowLatencyDispatch(Staging& s, const Sizes& sizes,
                             const loomEpLowLatencyDispatchArgs_t& device,
                             loomEpLowLatencyDispatchArgs_t& host);
void stageLowLatencyCombine(Staging& s, const Sizes& sizes,
                            const loomEpLowLatencyCombineArgs_t& device,
                            loomEpLowLatencyCombineArgs_t& host);

}  // namespace loom::ep
