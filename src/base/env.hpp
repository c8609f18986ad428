// Every LOOM_* environment parameter is declared once, here or beside the backend it belongs to,
// with its default and its valid values; each is documented in docs/configuration.md. A getter
// returns a valid value or throws loomInvalidArgument naming the variable, its value and what it
// takes (never a silent clamp); checkAll() runs every getter of this file at communicator init, so
// a bad value fails there whichever paths would use it.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>

namespace loom::env {

// Raw access (for variables Loom does not own, such as RANK or OMPI_COMM_WORLD_SIZE).
std::optional<std::string> get(const char* name);
int64_t getInt(const char* name, int64_t fallback);
// Checked access, for Loom's own parameters (and a backend's, beside it).
// An integer in [min, max]; with `multiple` > 1 also a multiple of it.
int64_t getIntIn(const char* name, int64_t fallback, int64_t min, int64_t max,
                 int64_t multiple = 1);
bool getFlag(const char* name, bool fallback);  // 0 or 1
// One of `words` (exactly as spelled there).
std::string getWord(const char* name, const char* fallback,
                    std::initializer_list<const char*> words);

// Throws loomInvalidArgument for the first of this file's variables that is set to a value its
// getter refuses.
void checkAll();

// Where two ranks' settings lines (NAME=value items split by `separator`, compared at init so
// that collectives meet) first differ: "NAME=a on rank 0, NAME=b on rank 1" ("nothing" for an
// item one line lacks).
std::string settingsDifference(const std::string& mine, int myRank, const std::string& theirs,
                               int theirRank, char separator);

// Loom's own parameters.
std::string debugLevel();     // LOOM_DEBUG
std::string debugSubsys();    // LOOM_DEBUG_SUBSYS
std::string debugFile();      // LOOM_DEBUG_FILE: the log's file instead of stderr
int64_t timeoutMs();          // LOOM_TIMEOUT (seconds in the variable), default 600 s
std::string algoOverride();   // LOOM_ALGO, e.g. "allreduce:ring,allgather:direct"
std::string planDir();        // LOOM_PLAN_DIR: execution plans (*.json) every communicator loads
int64_t checkMode();          // LOOM_CHECK: 0 off, 1 (default) signatures, 2 also a round trip
int64_t shmChunkBytes();      // LOOM_SHM_CHUNK_BYTES
int64_t directMaxBytes();     // LOOM_DIRECT_MAX_BYTES
int64_t p2pBufferBytes();     // LOOM_P2P_BUFFER_BYTES
int64_t streamingMinBytes();  // LOOM_STREAMING_MIN_BYTES
int64_t epBufferBytes();      // LOOM_EP_BUFFER_BYTES: expert parallelism's normal staging
std::string accumType();      // LOOM_ACCUM_TYPE
std::string jobSecret();      // LOOM_JOB_SECRET (hex)
std::string commId();         // LOOM_COMM_ID (host:port)
std::string socketIfname();   // LOOM_SOCKET_IFNAME: interfaces of the TCP transport
int64_t socketStreams();      // LOOM_SOCKET_STREAMS: TCP connections per peer and channel
std::string nodeId();         // LOOM_NODE_ID: test-only suffix of the host identity
std::string device();         // LOOM_DEVICE: the device of communicators whose config names none
std::string devicePlugins();  // LOOM_DEVICE_PLUGIN: device plug-ins to load, comma-separated
// Heterogeneous communicators (comm/hetero.*).
std::string clusterSplit();  // LOOM_CLUSTER_SPLIT: split one device kind into several clusters
int64_t heteroChunkBytes();  // LOOM_HETERO_CHUNK_BYTES: pipeline chunk between clusters
std::string heteroAlgo();    // LOOM_HETERO_ALGO: auto, flat or composed (allreduce)
std::string besideWait();    // LOOM_BESIDE_WAIT: block, spin, thread or auto
bool deviceBlocking();       // LOOM_DEVICE_BLOCKING=1: device ranks' host-algorithm calls block
// Seeing inside a job (comm/flight_recorder.hpp, comm/trace.hpp, comm/status_server.hpp).
std::string flightDir();  // LOOM_FLIGHT_DIR: where flight records are dumped ("" : no dumps)
int64_t flightEntries();  // LOOM_FLIGHT_ENTRIES: calls each communicator's recorder keeps
std::string traceDir();   // LOOM_TRACE: where per-rank Chrome/Perfetto traces go ("" : none)
int64_t traceWaitUs();    // LOOM_TRACE_WAIT_US: waits at least this long are traced
bool statusEnabled();     // LOOM_STATUS: the per-process status socket (1) or not (0)
std::string statusDir();  // LOOM_STATUS_DIR: the status sockets' directory ("" : default)
// A backend's own parameters are declared beside it (device/cuda/cuda_env.hpp).
// The network transport between nodes and the reliable-datagram transport's parameters.
std::string transport();    // LOOM_TRANSPORT: tcp (default) or rudp
int64_t rudpPaths();        // LOOM_RUDP_PATHS: UDP sockets (source ports) per rank
int64_t rudpWindowBytes();  // LOOM_RUDP_WINDOW_BYTES: send/receive ring per peer and class
int64_t rudpRetries();      // LOOM_RUDP_RETRIES: retransmissions of a packet before failing
int64_t rudpRtoMaxMs();     // LOOM_RUDP_RTO_MAX_MS: ceiling of the backed-off timeout
bool rudpGso();             // LOOM_RUDP_GSO: UDP segmentation offload / GRO bursts (1) or not (0)
std::string rudpFollowCaller();  // LOOM_RUDP_FOLLOW_CALLER: progress thread on its caller's CPU
                                 // (auto, 1, 0)
bool rudpCallerReceives();  // LOOM_RUDP_CALLER_RECEIVES: a waiting caller reads the sockets (1)
std::string rudpFaults();   // LOOM_RUDP_FAULTS: test-only "drop=P,dup=P,delay=P"

}  // namespace loom::env
