#include "comm/trace_text.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "algorithms/context.hpp"
#include "base/dtype.hpp"
#include "base/fd_writer.hpp"

namespace loom {

namespace {

constexpr size_t kBufferBytes = 256 * 1024;  // written when nearly full: ~1000 events a write
constexpr size_t kEventBytes = 512;          // an event's text without its variable strings

const char* categoryText(TraceEvent::Kind kind) {
  switch (kind) {
    case TraceEvent::Kind::kCall:
      return "call";
    case TraceEvent::Kind::kOperation:
      return "lane";
    case TraceEvent::Kind::kWait:
      return "wait";
    case TraceEvent::Kind::kDevice:
      return "device";
  }
  return "device";
}

std::string trackText(int track) {
  if (track == kTrackCalls) return "collectives";
  if (track == kTrackPointToPoint) return "point-to-point";
  if (track == kTrackWaits) return "waits";
  if (track == kTrackDevice) return "device";
  if (track >= kTrackDeviceLane) return "device lane";
  const char* what = track >= kTrackLocal      ? "local "
                     : track >= kTrackRecvFrom ? "recv from "
                                               : "send to ";
  return what + std::to_string(track % 100000);
}

bool plain(unsigned char c) { return c != '"' && c != '\\' && c >= 0x20; }

// s as a JSON string, as TraceText::string writes it (the pieces prepared once per file).
std::string jsonQuoted(const std::string& s) {
  std::string out = "\"";
  for (const char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (plain(c)) {
      out += ch;
    } else if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else {
      char escape[8];
      std::snprintf(escape, sizeof(escape), "\\u%04x", c);
      out += escape;
    }
  }
  return out + "\"";
}

// The longest text string() can make of s.
size_t escapedBound(const char* s) { return s == nullptr ? 2 : 6 * std::strlen(s) + 2; }

}  // namespace

TraceText::TraceText(int fd, const FlightIdentity& identity)
    : fd_(fd), identity_(identity), buffer_(new char[kBufferBytes]), capacity_(kBufferBytes) {
  pidTid_ = ",\"ph\":\"X\",\"pid\":" + std::to_string(identity_.pid) + ",\"tid\":";
  callTail_ = ",\"comm\":" + jsonQuoted(identity_.name) + ",\"job\":" + jsonQuoted(identity_.job) +
              ",\"result\":";
}

void TraceText::reserve(size_t n) {
  if (capacity_ - used_ >= n) return;
  flush();
  if (capacity_ >= n) return;
  // A communicator name of many KiB: the one allocation this class may make after its first.
  buffer_.reset(new char[n]);
  capacity_ = n;
}

void TraceText::append(const char* text, size_t n) {
  std::memcpy(buffer_.get() + used_, text, n);
  used_ += n;
}

void TraceText::literal(const char* text) { append(text, std::strlen(text)); }

void TraceText::string(const char* s) {
  char* out = buffer_.get() + used_;
  *out++ = '"';
  for (; s != nullptr && *s != '\0'; ++s) {
    const unsigned char c = static_cast<unsigned char>(*s);
    if (plain(c)) {
      *out++ = static_cast<char>(c);
    } else if (c == '"' || c == '\\') {
      *out++ = '\\';
      *out++ = static_cast<char>(c);
    } else {
      std::memcpy(out, "\\u00", 4);
      out[4] = "0123456789abcdef"[c >> 4];
      out[5] = "0123456789abcdef"[c & 0xf];
      out += 6;
    }
  }
  *out++ = '"';
  used_ = static_cast<size_t>(out - buffer_.get());
}

void TraceText::uint(uint64_t v) {
  static constexpr char kPairs[] =
      "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
      "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
      "8081828384858687888990919293949596979899";
  char digits[20];
  char* end = digits + sizeof(digits);
  char* p = end;
  while (v >= 100) {
    p -= 2;
    std::memcpy(p, kPairs + 2 * (v % 100), 2);
    v /= 100;
  }
  if (v >= 10) {
    p -= 2;
    std::memcpy(p, kPairs + 2 * v, 2);
  } else {
    *--p = static_cast<char>('0' + v);
  }
  append(p, static_cast<size_t>(end - p));
}

void TraceText::integer(int64_t v) {
  if (v < 0) {
    buffer_[used_++] = '-';
    uint(static_cast<uint64_t>(0) - static_cast<uint64_t>(v));
  } else {
    uint(static_cast<uint64_t>(v));
  }
}

// Microseconds with three decimals, from nanoseconds (Chrome trace timestamps), as FdWriter.
void TraceText::micros(int64_t ns) {
  uint64_t magnitude = static_cast<uint64_t>(ns);
  if (ns < 0) {
    buffer_[used_++] = '-';
    magnitude = static_cast<uint64_t>(0) - magnitude;
  }
  uint(magnitude / 1000);
  const uint64_t frac = magnitude % 1000;
  char* out = buffer_.get() + used_;
  out[0] = '.';
  out[1] = static_cast<char>('0' + frac / 100);
  out[2] = static_cast<char>('0' + frac / 10 % 10);
  out[3] = static_cast<char>('0' + frac % 10);
  used_ += 4;
}

void TraceText::header(int64_t realtimeOffsetNs) {
  const std::string pid = std::to_string(identity_.pid);
  std::string name = "rank " + std::to_string(identity_.rank) + " of " +
                     std::to_string(identity_.nranks) + " (" + identity_.host + ":" + pid + ")";
  if (!identity_.name.empty()) name += " " + identity_.name;
  reserve(kEventBytes +
          6 * (name.size() + identity_.name.size() + identity_.host.size() + identity_.job.size()));
  literal("[\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":");
  append(pid);
  literal(",\"args\":{\"name\":");
  string(name.c_str());
  // Read by scripts/loom_trace_merge.py; viewers ignore extra arguments.
  literal(",\"loom_job\":");
  string(identity_.job.c_str());
  literal(",\"loom_comm\":");
  string(identity_.name.c_str());
  literal(",\"loom_rank\":");
  integer(identity_.rank);
  literal(",\"loom_nranks\":");
  integer(identity_.nranks);
  literal(",\"loom_host\":");
  string(identity_.host.c_str());
  literal(",\"loom_realtime_offset_ns\":");
  integer(realtimeOffsetNs);
  literal("}},\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":");
  append(pid);
  literal(",\"args\":{\"sort_index\":");
  integer(identity_.rank);
  literal("}},\n");
}

void TraceText::trackName(int track) {
  const std::string pid = std::to_string(identity_.pid);
  literal("{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":");
  append(pid);
  literal(",\"tid\":");
  integer(track);
  literal(",\"args\":{\"name\":");
  string(trackText(track).c_str());
  literal("}},\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":");
  append(pid);
  literal(",\"tid\":");
  integer(track);
  literal(",\"args\":{\"sort_index\":");
  integer(track);
  literal("}},\n");
}

void TraceText::callArgs(const TraceEvent& e) {
  const bool collective = e.flightKind == static_cast<uint8_t>(FlightKind::kCollective);
  literal("\"seq\":");
  uint(e.seq);
  literal(",\"bytes\":");
  uint(e.bytes);
  literal(",\"count\":");
  uint(e.count);
  literal(",\"dtype\":");
  string(dtypeName(static_cast<loomDataType_t>(e.dtype)));
  if (collective && (e.func == loomFuncAllReduce || e.func == loomFuncReduce ||
                     e.func == loomFuncReduceScatter)) {
    literal(",\"redop\":");
    string(opName(static_cast<loomRedOp_t>(e.op)));
  }
  if (e.text != nullptr) {
    literal(",\"algorithm\":");
    string(e.text);
  }
  if (!collective) {
    literal(",\"peer\":");
    integer(e.peer);
    literal(",\"tag\":");
    integer(e.tag);
  }
  append(callTail_);
  string(loomGetErrorString(static_cast<loomResult_t>(e.result)));
}

void TraceText::event(const TraceEvent& e) {
  const bool call = e.kind == TraceEvent::Kind::kCall;
  const char* name = e.text;
  if (call) {
    name = e.flightKind == static_cast<uint8_t>(FlightKind::kCollective)
               ? funcName(static_cast<loomFunc_t>(e.func))
               : flightKindName(static_cast<FlightKind>(e.flightKind));
  }
  // Every string of the event bounded; the static ones (names of dtypes, ops, results, tracks)
  // are short and inside kEventBytes.
  reserve(2 * kEventBytes + callTail_.size() + escapedBound(name) +
          (call ? escapedBound(e.text) : 0));
  // Sorted: a pairwise alltoall of many ranks has two tracks per peer.
  const auto named = std::lower_bound(namedTracks_.begin(), namedTracks_.end(), e.track);
  if (named == namedTracks_.end() || *named != e.track) {
    namedTracks_.insert(named, e.track);
    trackName(e.track);
  }
  literal("{\"name\":");
  string(name);
  literal(",\"cat\":\"");
  literal(categoryText(e.kind));
  buffer_[used_++] = '"';
  append(pidTid_);
  integer(e.track);
  literal(",\"ts\":");
  micros(e.startNs);
  literal(",\"dur\":");
  micros(std::max<int64_t>(e.endNs - e.startNs, 0));
  literal(",\"args\":{");
  if (call) {
    callArgs(e);
  } else if (e.kind == TraceEvent::Kind::kOperation) {
    literal("\"bytes\":");
    uint(e.bytes);
    if (e.peer >= 0) {
      literal(",\"peer\":");
      integer(e.peer);
    }
  } else if (e.kind == TraceEvent::Kind::kWait) {
    literal("\"peer\":");
    integer(e.peer);
  } else {
    literal("\"call\":");
    uint(e.seq);
  }
  literal("}},\n");
}

void TraceText::end(int64_t nowNs) {
  reserve(kEventBytes);
  // The last element needs no comma after it; the array is closed for strict JSON readers.
  literal("{\"name\":\"loom_trace_end\",\"ph\":\"i\",\"s\":\"p\",\"pid\":");
  integer(identity_.pid);
  literal(",\"tid\":1,\"ts\":");
  micros(nowNs);
  literal("}\n]\n");
}

bool TraceText::flush() {
  if (!failed_ && !writeAll(fd_, buffer_.get(), used_)) failed_ = true;
  used_ = 0;
  return !failed_;
}

}  // namespace loom
