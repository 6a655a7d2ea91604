#pragma once
// A rank's signs of life for stratum-run's rank shim, which ends the job when
// a rank stops making progress (--heartbeat_timeout) instead of leaving its
// peers to wait out the 10-minute collective timeout. The shim passes a socket
// in STRATUM_HEARTBEAT_FD; without it (plain mpirun, a single process) every
// call here does nothing.
//
// Progress is reported by the thread doing the work: collective waits, engine
// steps, file writes, tokenization. A rank whose main thread is stuck (a hung
// kernel, a deadlock, a blocked read) stops beating; one waiting for a stuck
// peer keeps beating from its wait loop, so the stuck one is named.
namespace stratum::heartbeat {

// A sign of progress. Cheap (a clock read); writes at most one byte a second.
void beat();
// From now on the shim enforces its timeout (the engine calls it at its first
// step: start-up, which may legitimately pause, is covered by the collective
// timeout instead).
void start_watch();
// This rank is ending because another rank failed: the shim must not report
// it as the failing one.
void peer_failed();

// The bytes on the socket (the shim's side reads them).
inline constexpr char kBeat = '.';
inline constexpr char kStartWatch = 'W';
inline constexpr char kPeerFailed = 'P';
inline constexpr const char* kFdVariable = "STRATUM_HEARTBEAT_FD";

}  // namespace stratum::heartbeat
