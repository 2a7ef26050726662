#include "common.h"

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>

namespace gitlb {

std::string ErrnoName(int err) {
  if (err < 0) err = -err;
  const char* name = strerrorname_np(err);
  if (name) return name;
  return "E" + std::to_string(err);
}

Napi::Error ErrnoError(Napi::Env env, int err, const std::string& message) {
  if (err < 0) err = -err;
  std::string full = message + ": " + ErrnoName(err) + " (" + strerror(err) + ")";
  Napi::Error e = Napi::Error::New(env, full);
  e.Set("code", Napi::String::New(env, ErrnoName(err)));
  e.Set("errno", Napi::Number::New(env, err));
  return e;
}

void ThrowErrno(Napi::Env env, int err, const std::string& message) {
  throw ErrnoError(env, err, message);
}

static thread_local std::string* g_sink = nullptr;

void SetLogSink(std::string* sink) { g_sink = sink; }

int LibbpfPrint(enum libbpf_print_level level, const char* fmt, va_list args) {
  if (!g_sink) {
    if (level == LIBBPF_WARN && getenv("GITLB_BPF_DEBUG")) return vfprintf(stderr, fmt, args);
    return 0;
  }
  if (level == LIBBPF_DEBUG && !getenv("GITLB_BPF_DEBUG")) return 0;
  char buf[4096];
  va_list copy;
  va_copy(copy, args);
  int n = vsnprintf(buf, sizeof buf, fmt, copy);
  va_end(copy);
  if (n < 0) return n;
  if ((size_t)n < sizeof buf) {
    g_sink->append(buf, n);
  } else {
    std::string big(n + 1, '\0');
    vsnprintf(&big[0], big.size(), fmt, args);
    big.resize(n);
    g_sink->append(big);
  }
  return n;
}

int ArgInt(const Napi::CallbackInfo& info, size_t i, const char* what) {
  if (i >= info.Length() || !info[i].IsNumber())
    throw Napi::TypeError::New(info.Env(), std::string(what) + " must be a number");
  return info[i].As<Napi::Number>().Int32Value();
}

uint32_t ArgU32(const Napi::CallbackInfo& info, size_t i, const char* what) {
  if (i >= info.Length() || !info[i].IsNumber())
    throw Napi::TypeError::New(info.Env(), std::string(what) + " must be a number");
  return info[i].As<Napi::Number>().Uint32Value();
}

int ArgFd(const Napi::CallbackInfo& info, size_t i) {
  int fd = ArgInt(info, i, "fd");
  if (fd < 0) ThrowErrno(info.Env(), EBADF, "invalid fd " + std::to_string(fd));
  return fd;
}

Napi::Buffer<uint8_t> ArgBuffer(const Napi::CallbackInfo& info, size_t i, const char* what) {
  if (i >= info.Length() || !info[i].IsBuffer())
    throw Napi::TypeError::New(info.Env(), std::string(what) + " must be a Buffer");
  return info[i].As<Napi::Buffer<uint8_t>>();
}

std::string ArgString(const Napi::CallbackInfo& info, size_t i, const char* what) {
  if (i >= info.Length() || !info[i].IsString())
    throw Napi::TypeError::New(info.Env(), std::string(what) + " must be a string");
  return info[i].As<Napi::String>().Utf8Value();
}

}  // namespace gitlb

