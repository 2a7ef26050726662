{
  "targets": [
    {
      "target_name": "gitlb_bpf",
      "sources": ["addon.cc", "errors.cc", "object.cc", "maps.cc", "progs.cc", "perf.cc", "raw.cc"],
      "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")"],
      "defines": ["NAPI_VERSION=8", "NAPI_CPP_EXCEPTIONS"],
      "cflags_cc!": ["-fno-exceptions"],
      "cflags_cc": ["-fexceptions", "-std=c++17", "-Wall", "-Wno-missing-field-initializers"],
      "libraries": ["-lbpf", "-lelf", "-lz"]
    }
  ]
}
