// Shared helpers of the gitlb libbpf addon: errno-carrying errors and the
// per-thread capture of libbpf's log (verifier output arrives through it).
#pragma once
#include <napi.h>
#include <initializer_list>
#include <string>

extern "C" {
#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
}

namespace gitlb {

// Attach types newer than the Debian 12 uapi headers (kernel 6.6+).
constexpr int kAttachTcxIngress = 46;
constexpr int kAttachTcxEgress = 47;

// errno (positive) -> "ENOENT"; unknown numbers become "E<n>".
std::string ErrnoName(int err);

// A JS Error with .code (errno name) and .errno (positive number).
Napi::Error ErrnoError(Napi::Env env, int err, const std::string& message);
[[noreturn]] void ThrowErrno(Napi::Env env, int err, const std::string& message);

// libbpf's print callback appends to this buffer when set (per thread, so
// concurrent AsyncWorkers keep their own logs).
void SetLogSink(std::string* sink);

// Argument helpers that throw TypeError with a clear message.
int ArgInt(const Napi::CallbackInfo& info, size_t i, const char* what);
uint32_t ArgU32(const Napi::CallbackInfo& info, size_t i, const char* what);
// A file descriptor argument (default: the first); negative ones throw EBADF.
int ArgFd(const Napi::CallbackInfo& info, size_t i = 0);
Napi::Buffer<uint8_t> ArgBuffer(const Napi::CallbackInfo& info, size_t i, const char* what);
std::string ArgString(const Napi::CallbackInfo& info, size_t i, const char* what);

// A native function of the addon and the name it is exported under (also the JS function's name, for stack traces).
struct Export {
  const char* name;
  Napi::Value (*fn)(const Napi::CallbackInfo&);
};
inline void ExportAll(Napi::Env env, Napi::Object exports, std::initializer_list<Export> fns) {
  for (const Export& e : fns) exports.Set(e.name, Napi::Function::New(env, e.fn, e.name));
}

void InitObject(Napi::Env env, Napi::Object exports);
void InitMaps(Napi::Env env, Napi::Object exports);
void InitProgs(Napi::Env env, Napi::Object exports);
void InitRaw(Napi::Env env, Napi::Object exports);
void InitPerf(Napi::Env env, Napi::Object exports);

}  // namespace gitlb
