#include "plan/plan_format.hpp"

#include <cctype>
#include <cstdio>
#include <sstream>

#include "algorithms/context.hpp"
#include "base/error.hpp"
#include "base/sha256.hpp"

namespace loom {

namespace {

const char* const kBufferNames[] = {"input", "output", "scratch"};
const char* const kOpNames[] = {"send", "recv", "recv_reduce", "copy", "reduce"};
constexpr uint32_t kMaxChunks = 1u << 16;
constexpr int kMaxRanks = 4096;
constexpr size_t kMaxOps = 1u << 20;

// Where in the plan a check is: prefixes every message.
struct Place {
  std::string text;
  [[noreturn]] void fail(const std::string& what) const {
    LOOM_THROW(loomInvalidArgument, text, ": ", what);
  }
};

const JsonValue& member(const JsonValue& object, const char* key, const Place& at) {
  const JsonValue* v = object.find(key);
  if (v == nullptr) at.fail(std::string("missing \"") + key + "\"");
  return *v;
}

int64_t integerIn(const JsonValue& v, const char* what, int64_t lo, int64_t hi, const Place& at) {
  if (!v.isNumber() || !v.isInteger())
    at.fail(std::string(what) + " must be an integer, not " + JsonValue::kindName(v.kind()));
  if (v.integer() < lo || v.integer() > hi)
    at.fail(std::string(what) + " = " + std::to_string(v.integer()) + " is outside [" +
            std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return v.integer();
}

void onlyMembers(const JsonValue& object, std::initializer_list<const char*> allowed,
                 const Place& at) {
  for (const auto& [key, value] : object.members()) {
    bool known = false;
    for (const char* name : allowed) known |= key == name;
    if (!known) at.fail("unknown member \"" + key + "\"");
  }
}

ChunkRef chunkRef(const JsonValue& v, const Plan& plan, const Place& at) {
  if (!v.isArray() || v.items().size() < 2 || v.items().size() > 3 || !v.items()[0].isString())
    at.fail("a chunk is [\"input\"|\"output\"|\"scratch\", index] or [buffer, index, count]");
  ChunkRef ref;
  const std::string& name = v.items()[0].string();
  int buffer = -1;
  for (int b = 0; b < 3; ++b)
    if (name == kBufferNames[b]) buffer = b;
  if (buffer < 0) at.fail("unknown buffer \"" + name + "\"");
  ref.buffer = static_cast<PlanBuffer>(buffer);
  const uint32_t chunks = ref.buffer == PlanBuffer::kScratch
                              ? plan.scratchChunks
                              : plan.blocksOf(ref.buffer) * plan.chunksPerBlock;
  if (chunks == 0) at.fail("the plan has no " + name + " chunks");
  ref.index = static_cast<uint32_t>(integerIn(v.items()[1], "chunk index", 0, chunks - 1, at));
  if (v.items().size() == 3)
    ref.count = static_cast<uint32_t>(integerIn(v.items()[2], "chunk count", 1, chunks, at));
  const uint32_t block = ref.index / plan.chunksPerBlock;
  if ((ref.index + ref.count - 1) / plan.chunksPerBlock != block || ref.index + ref.count > chunks)
    at.fail("chunks " + planChunkText(ref) + " cross a block boundary (" +
            std::to_string(plan.chunksPerBlock) + " chunks a block)");
  return ref;
}

PlanOp planOp(const JsonValue& v, const Plan& plan, int rank, const Place& at) {
  if (!v.isObject()) at.fail("an operation must be an object");
  const JsonValue& kind = member(v, "op", at);
  if (!kind.isString()) at.fail("\"op\" must be a string");
  PlanOp op;
  int found = -1;
  for (int k = 0; k < 5; ++k)
    if (kind.string() == kOpNames[k]) found = k;
  if (found < 0)
    at.fail("unknown operation \"" + kind.string() + "\" (send, recv, recv_reduce, copy, reduce)");
  op.kind = static_cast<PlanOpKind>(found);
  const bool channel = op.kind == PlanOpKind::kSend || op.kind == PlanOpKind::kRecv ||
                       op.kind == PlanOpKind::kRecvReduce;
  const bool reduces = op.kind == PlanOpKind::kRecvReduce || op.kind == PlanOpKind::kReduce;
  if (channel) {
    onlyMembers(v, {"op", "peer", "src", "dst", "final"}, at);
    op.peer = static_cast<int>(integerIn(member(v, "peer", at), "peer", 0, plan.nranks - 1, at));
    if (op.peer == rank) at.fail("a rank cannot send to or receive from itself");
  } else {
    onlyMembers(v, {"op", "lane", "src", "srcs", "dst", "final"}, at);
    if (const JsonValue* lane = v.find("lane"))
      op.lane = static_cast<int>(integerIn(*lane, "lane", 0, 255, at));
  }
  if (op.kind != PlanOpKind::kSend) op.dst = chunkRef(member(v, "dst", at), plan, at);
  if (op.kind == PlanOpKind::kReduce) {
    const JsonValue& srcs = member(v, "srcs", at);
    if (!srcs.isArray() || srcs.items().empty() || srcs.items().size() > 1024)
      at.fail("\"srcs\" must be a list of 1 to 1024 chunks");
    for (const JsonValue& s : srcs.items()) op.srcs.push_back(chunkRef(s, plan, at));
  } else if (op.kind != PlanOpKind::kRecv) {
    op.srcs.push_back(chunkRef(member(v, "src", at), plan, at));
  }
  if (const JsonValue* final = v.find("final")) {
    if (!final->isBool()) at.fail("\"final\" must be true or false");
    if (!reduces && final->boolean()) at.fail("only reductions can be final");
    op.final = final->boolean();
  }
  for (const ChunkRef& s : op.srcs)
    if (s.count != (op.kind == PlanOpKind::kSend ? s.count : op.dst.count))
      at.fail("operands of different chunk counts");
  if (op.kind != PlanOpKind::kSend && op.dst.buffer == PlanBuffer::kInput)
    at.fail("the input is read-only");
  return op;
}

void header(const JsonValue& json, Plan& plan, const Place& at) {
  onlyMembers(json,
              {"loom_plan", "name", "collective", "nranks", "min_bytes", "max_bytes",
               "chunks_per_block", "scratch_chunks", "pipeline", "ranks", "comment"},
              at);
  plan.version =
      static_cast<int>(integerIn(member(json, "loom_plan", at), "loom_plan", 1, 1000, at));
  if (plan.version != kPlanFormatVersion)
    at.fail("format version " + std::to_string(plan.version) + " (this Loom reads version " +
            std::to_string(kPlanFormatVersion) + ")");
  const JsonValue& name = member(json, "name", at);
  if (!name.isString() || name.string().empty() || name.string().size() > 64)
    at.fail("\"name\" must be a string of 1 to 64 characters");
  for (char c : name.string())
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.'))
      at.fail("\"name\" may hold letters, digits, '_', '-' and '.' only");
  plan.name = name.string();
  const JsonValue& func = member(json, "collective", at);
  plan.func = func.isString() ? planFuncByName(func.string()) : loomNumFuncs;
  if (plan.func == loomNumFuncs)
    at.fail("\"collective\" must be allreduce, allgather, reducescatter or alltoall");
  plan.nranks = static_cast<int>(integerIn(member(json, "nranks", at), "nranks", 1, kMaxRanks, at));
  if (const JsonValue* v = json.find("min_bytes"))
    plan.minBytes = static_cast<uint64_t>(integerIn(*v, "min_bytes", 0, INT64_MAX, at));
  if (const JsonValue* v = json.find("max_bytes"); v != nullptr && !v->isNull())
    plan.maxBytes = static_cast<uint64_t>(integerIn(*v, "max_bytes", 0, INT64_MAX, at));
  if (plan.maxBytes < plan.minBytes) at.fail("max_bytes is below min_bytes");
  plan.chunksPerBlock = static_cast<uint32_t>(
      integerIn(member(json, "chunks_per_block", at), "chunks_per_block", 1, kMaxChunks, at));
  if (const JsonValue* v = json.find("scratch_chunks"))
    plan.scratchChunks = static_cast<uint32_t>(integerIn(*v, "scratch_chunks", 0, kMaxChunks, at));
  if (const JsonValue* p = json.find("pipeline"); p != nullptr && !p->isNull()) {
    if (!p->isObject()) at.fail("\"pipeline\" must be an object");
    onlyMembers(*p, {"chunk_bytes", "max_parts"}, at);
    plan.partBytes = static_cast<uint64_t>(
        integerIn(member(*p, "chunk_bytes", at), "pipeline.chunk_bytes", 64, INT64_MAX, at));
    plan.maxParts =
        static_cast<uint32_t>(integerIn(member(*p, "max_parts", at), "max_parts", 1, 1024, at));
  }
}

}  // namespace

const char* planBufferName(PlanBuffer buffer) { return kBufferNames[static_cast<int>(buffer)]; }

std::string planChunkText(const ChunkRef& ref) {
  std::string text = std::string(planBufferName(ref.buffer)) + "[" + std::to_string(ref.index);
  if (ref.count > 1) text.append(":").append(std::to_string(ref.index + ref.count));
  return text + "]";
}
const char* planOpName(PlanOpKind kind) { return kOpNames[static_cast<int>(kind)]; }

bool planSupports(loomFunc_t func) {
  return func == loomFuncAllReduce || func == loomFuncAllGather || func == loomFuncReduceScatter ||
         func == loomFuncAllToAll;
}

loomFunc_t planFuncByName(std::string_view name) {
  if (name == "allreduce") return loomFuncAllReduce;
  if (name == "allgather") return loomFuncAllGather;
  if (name == "reducescatter") return loomFuncReduceScatter;
  if (name == "alltoall") return loomFuncAllToAll;
  return loomNumFuncs;
}

uint32_t Plan::inputBlocks() const {
  return func == loomFuncReduceScatter || func == loomFuncAllToAll ? nranks : 1;
}
uint32_t Plan::outputBlocks() const {
  return func == loomFuncAllGather || func == loomFuncAllToAll ? nranks : 1;
}
uint32_t Plan::blocksOf(PlanBuffer buffer) const {
  if (buffer == PlanBuffer::kInput) return inputBlocks();
  if (buffer == PlanBuffer::kOutput) return outputBlocks();
  return (scratchChunks + chunksPerBlock - 1) / chunksPerBlock;
}

Plan planFromJson(const JsonValue& json) {
  Plan plan;
  Place at{"plan"};
  if (!json.isObject()) at.fail("a plan is a JSON object");
  if (const JsonValue* name = json.find("name"); name != nullptr && name->isString())
    at.text = "plan '" + name->string() + "'";
  header(json, plan, at);
  const JsonValue& ranks = member(json, "ranks", at);
  if (!ranks.isArray()) at.fail("\"ranks\" must be a list");
  if (static_cast<int>(ranks.items().size()) != plan.nranks)
    at.fail("\"ranks\" lists " + std::to_string(ranks.items().size()) + " ranks but nranks is " +
            std::to_string(plan.nranks));
  size_t total = 0;
  for (int r = 0; r < plan.nranks; ++r) {
    const JsonValue& rank = ranks.items()[r];
    Place rankAt{at.text + ": rank " + std::to_string(r)};
    if (!rank.isObject()) rankAt.fail("a rank is an object with \"ops\"");
    onlyMembers(rank, {"ops"}, rankAt);
    const JsonValue& ops = member(rank, "ops", rankAt);
    if (!ops.isArray()) rankAt.fail("\"ops\" must be a list");
    total += ops.items().size();
    if (total > kMaxOps) at.fail("more than " + std::to_string(kMaxOps) + " operations");
    PlanRank out;
    for (size_t i = 0; i < ops.items().size(); ++i) {
      Place opAt{rankAt.text + " op " + std::to_string(i)};
      out.ops.push_back(planOp(ops.items()[i], plan, r, opAt));
    }
    plan.ranks.push_back(std::move(out));
  }
  return plan;
}

Plan parsePlan(std::string_view text) { return planFromJson(parseJson(text)); }

namespace {

void refJson(std::ostringstream& out, const ChunkRef& ref) {
  out << "[\"" << planBufferName(ref.buffer) << "\"," << ref.index;
  if (ref.count != 1) out << "," << ref.count;
  out << "]";
}

void opJson(std::ostringstream& out, const PlanOp& op) {
  out << "{\"op\":\"" << planOpName(op.kind) << "\"";
  if (op.peer >= 0) out << ",\"peer\":" << op.peer;
  if (op.kind == PlanOpKind::kCopy || op.kind == PlanOpKind::kReduce)
    out << ",\"lane\":" << op.lane;
  if (op.kind != PlanOpKind::kSend) {
    out << ",\"dst\":";
    refJson(out, op.dst);
  }
  if (op.kind == PlanOpKind::kReduce) {
    out << ",\"srcs\":[";
    for (size_t s = 0; s < op.srcs.size(); ++s) {
      if (s > 0) out << ",";
      refJson(out, op.srcs[s]);
    }
    out << "]";
  } else if (!op.srcs.empty()) {
    out << ",\"src\":";
    refJson(out, op.srcs[0]);
  }
  if (op.final) out << ",\"final\":true";
  out << "}";
}

}  // namespace

std::string planToJson(const Plan& plan) {
  std::ostringstream out;
  out << "{\"loom_plan\":" << plan.version << ",\"name\":" << jsonQuote(plan.name)
      << ",\"collective\":\"" << funcName(plan.func) << "\",\"nranks\":" << plan.nranks
      << ",\"min_bytes\":" << plan.minBytes << ",\"max_bytes\":";
  if (plan.maxBytes == UINT64_MAX)
    out << "null";
  else
    out << plan.maxBytes;
  out << ",\"chunks_per_block\":" << plan.chunksPerBlock
      << ",\"scratch_chunks\":" << plan.scratchChunks;
  if (plan.partBytes > 0)
    out << ",\"pipeline\":{\"chunk_bytes\":" << plan.partBytes << ",\"max_parts\":" << plan.maxParts
        << "}";
  out << ",\"ranks\":[";
  for (size_t r = 0; r < plan.ranks.size(); ++r) {
    out << (r > 0 ? "," : "") << "{\"ops\":[";
    for (size_t i = 0; i < plan.ranks[r].ops.size(); ++i) {
      if (i > 0) out << ",";
      opJson(out, plan.ranks[r].ops[i]);
    }
    out << "]}";
  }
  out << "]}";
  return out.str();
}

std::string planHash(const Plan& plan) {
  const Sha256Digest digest = sha256(planToJson(plan));
  char hex[17];
  for (int i = 0; i < 8; ++i) std::snprintf(hex + 2 * i, 3, "%02x", digest[i]);
  return std::string(hex, 16);
}

}  // namespace loom
