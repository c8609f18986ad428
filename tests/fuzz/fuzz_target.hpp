// What every fuzz target defines: libFuzzer's entry point, and seeds made with Loom's own encoders
// (valid messages the mutations start from). Built with libFuzzer (clang, LOOM_FUZZ=ON) or with
// tests/fuzz/fuzz_driver.cpp's bounded random driver.
//
// The property each target checks is the same: bytes from another process, whatever they are,
// end in a loom::Error (or a refusal) and never in a crash, a hang, undefined behaviour (the
// sanitizers), an unbounded allocation or a std::exception of another kind.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
void loomFuzzSeeds(std::vector<std::string>& seeds);
