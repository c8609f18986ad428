// Registration hooks of the algorithm families (one file each).
#pragma once

#include <vector>

#include "algorithms/context.hpp"

namespace loom {

void registerDirectAlgorithms(std::vector<Algorithm>& out);             // direct.cpp
void registerPipelinedAlgorithms(std::vector<Algorithm>& out);          // pipelined.cpp
void registerRingAlgorithms(std::vector<Algorithm>& out);               // ring.cpp
void registerAllToAllvAlgorithms(std::vector<Algorithm>& out);          // alltoallv.cpp
void registerPairwiseAlgorithms(std::vector<Algorithm>& out);           // pairwise.cpp
void registerHierarchicalAlgorithms(std::vector<Algorithm>& out);       // hierarchical.cpp
void registerHierarchicalBlockAlgorithms(std::vector<Algorithm>& out);  // hierarchical_blocks.cpp
void registerHierarchicalAllToAllAlgorithms(
    std::vector<Algorithm>& out);  // hierarchical_alltoall.cpp

}  // namespace loom
