// What loom-bench prints: nccl-tests' table on stdout and/or one CSV line per size. Host runs
// print exactly the columns they always did; CUDA runs add the device, the graph mode and the
// columns of the library compared with (--vs nccl).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_options.hpp"
#include "loom/loom.h"

namespace loom::bench {

// A timed batch of one library's calls.
struct Timing {
  bool ran = false;
  double seconds = 0;  // per call, slowest rank
  double algbw = 0;    // GB/s
  double busbw = 0;    // GB/s
};

// One pass (out-of-place or in-place) of one row.
struct PassResult {
  bool ran = false;
  double seconds = 0;
  double algbw = 0;
  double busbw = 0;
  bool checked = false;
  int64_t wrong = 0;
  Timing peer;  // the library compared with, on the same buffers
};

struct Row {
  size_t bytes = 0;
  size_t elems = 0;
  loomDataType_t dtype = loomFloat;
  loomRedOp_t redop = loomSum;
  const char* algo = "";
  PassResult oop;
  PassResult ip;
};

struct ReportLayout {
  bool deviceColumns = false;  // CSV: device, graph and the peer's columns (CUDA runs)
  std::string deviceName = "cpu";
  bool graph = false;
  bool peer = false;       // the table shows the peer's time, busbw and the time ratio
  std::string deviceLine;  // one more header line of the table, "" for none
  // nccl-tests' "# Using devices" block (one line per rank) and where the run went (CPU/GPU).
  std::vector<std::string> rankLines;
  std::string runsOn;
  std::string peerName = "nccl";  // the --vs library, in the JSON and the plot
};

// Prints on rank 0 only: the caller makes no calls on other ranks.
class Reporter {
 public:
  Reporter(const BenchOptions& options, int nranks, ReportLayout layout);
  ~Reporter();
  Reporter(const Reporter&) = delete;
  Reporter& operator=(const Reporter&) = delete;

  // Opens the --csv file; false, with the reason on stderr, when it cannot.
  bool open();
  void header();
  void row(const Row& row);
  // False when the -J or --plot file could not be written (the reason is on stderr).
  bool footer(int64_t totalWrong);
  // Whether the footer wrote its files (-J, --plot's data).
  bool written() const { return written_; }

 private:
  void tableHeader() const;
  void tableRow(const Row& row) const;
  void csvRow(const Row& row) const;
  bool writeJson(const std::string& path, int64_t totalWrong) const;

  const BenchOptions& opts_;
  int nranks_;
  ReportLayout layout_;
  bool table_;
  FILE* csv_ = nullptr;  // stdout, the --csv file, or none
  bool ownsCsv_ = false;
  std::vector<Row> rows_;  // for -J and --plot
  bool written_ = false;
  double busbwSum_ = 0;
  int busbwCount_ = 0;
  double peerBusbwSum_ = 0;
  int peerBusbwCount_ = 0;
};

// nccl-tests' "Rank N ... Pid P on HOST device D" lines, gathered from every rank over `comm`
// (a host communicator); rank 0's alone where that fails. Appends "N hosts" to *runsOn.
std::vector<std::string> rankLines(loomComm_t comm, int rank, int nranks, const std::string& device,
                                   std::string* runsOn);

// --plot (bench_plot.cpp): whether the python3 on PATH has matplotlib, and if not, how to get it
// for that python3; and the drawing of the -J file `json` into `png`.
bool plotReady(std::string* why);
bool drawPlot(const std::string& json, const std::string& png);

}  // namespace loom::bench
