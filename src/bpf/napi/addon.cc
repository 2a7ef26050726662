// Module entry of the gitlb libbpf addon: routes libbpf logging, registers functions.
#include "common.h"

namespace gitlb {
int LibbpfPrint(enum libbpf_print_level level, const char* fmt, va_list args);
}

using namespace gitlb;

static Napi::Object Init(Napi::Env env, Napi::Object exports) {
  libbpf_set_print(LibbpfPrint);
  libbpf_set_strict_mode(LIBBPF_STRICT_ALL);
  InitObject(env, exports);
  InitMaps(env, exports);
  InitProgs(env, exports);
  InitPerf(env, exports);
  InitRaw(env, exports);
  return exports;
}

NODE_API_MODULE(gitlb_bpf, Init)
