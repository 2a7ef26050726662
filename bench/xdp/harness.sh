# Sourced (from the repository's root) by the bench scripts that measure XDP programs with BPF_PROG_TEST_RUN.

# The project's BPF objects up to date (make knows the headers: a test of xdp_lb.c's date alone kept an object older
# than a header change) and the measuring harnesses in build/bench: xdp_empty.o (the floor), xdp_restore.o (the packet
# restored before every iteration) and xdp_snat_vary.o (a new flow every iteration).
build_xdp_harnesses() {
  mkdir -p build/bench
  make -s bpf
  for p in empty restore snat_vary; do
    clang -O2 -g -Wall -target bpf -I/usr/include/x86_64-linux-gnu -c bench/xdp/$p.c -o build/bench/xdp_$p.o
  done
}

# objs=(the paths given, made absolute): the objects of other builds handed to a measuring script, which may run
# from another directory or namespace.
absolute_objects() {
  objs=()
  local o
  for o in "$@"; do objs+=("$(cd "$(dirname "$o")" && pwd)/$(basename "$o")"); done
}
