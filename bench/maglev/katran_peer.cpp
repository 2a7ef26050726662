// Peer of bench/maglev: times Katran's C++ MaglevHash::generateHashRing (compiled from KATRAN_SRC by
// bench/maglev/run with g++ -O2; no Katran code lives in this repository). Equal weights; the endpoint hashes
// are distinct 64-bit values, as KatranLb gives them. Usage: katran_maglev M N runs. Prints the time of each
// run in ms, one per line, after 5 warm-up builds.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "katran/lib/MaglevHash.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s M N runs\n", argv[0]);
    return 2;
  }
  const uint32_t m = std::strtoul(argv[1], nullptr, 10);
  const int n = std::atoi(argv[2]);
  const int runs = std::atoi(argv[3]);
  std::vector<katran::Endpoint> eps(n);
  for (int i = 0; i < n; i++) {
    eps[i].num = i + 1;
    eps[i].weight = 1;
    eps[i].hash = (0x9e3779b97f4a7c15ULL * (uint64_t)(i + 1)) ^ 0xd1b54a32d192ed03ULL;
  }
  katran::MaglevHash mh;
  long sink = 0;
  for (int w = 0; w < 5; w++) sink += mh.generateHashRing(eps, m)[0];
  for (int r = 0; r < runs; r++) {
    auto t0 = std::chrono::steady_clock::now();
    auto ring = mh.generateHashRing(eps, m);
    auto t1 = std::chrono::steady_clock::now();
    sink += ring[r % m];
    std::printf("%.4f\n", std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  std::fprintf(stderr, "checksum %ld\n", sink);
  return 0;
}
