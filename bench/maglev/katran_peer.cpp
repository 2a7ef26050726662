// Peer of bench/maglev: times Katran's C++ MaglevHash::generateHashRing (compiled from KATRAN_SRC by
// bench/maglev/run with g++ -O2; no Katran code lives in this repository). Equal weights, the endpoint hashes
// distinct 64-bit values as KatranLb gives them. Prints one line per (M, N): "M N median_ms min_ms".
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "katran/lib/MaglevHash.h"

int main(int argc, char** argv) {
  const int runs = argc > 1 ? std::atoi(argv[1]) : 21;
  const uint32_t sizes[] = {16381, 65537, 131071};
  const int counts[] = {10, 100, 1000};
  long sink = 0;
  for (uint32_t m : sizes) {
    for (int n : counts) {
      std::vector<katran::Endpoint> eps(n);
      for (int i = 0; i < n; i++) {
        eps[i].num = i + 1;
        eps[i].weight = 1;
        eps[i].hash = 0x9e3779b97f4a7c15ULL * (uint64_t)(i + 1) ^ 0xd1b54a32d192ed03ULL; // distinct per endpoint
      }
      katran::MaglevHash mh;
      for (int w = 0; w < 5; w++) sink += mh.generateHashRing(eps, m)[0];
      std::vector<double> ms;
      for (int r = 0; r < runs; r++) {
        auto t0 = std::chrono::steady_clock::now();
        auto ring = mh.generateHashRing(eps, m);
        auto t1 = std::chrono::steady_clock::now();
        sink += ring[r % m];
        ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      }
      std::sort(ms.begin(), ms.end());
      std::printf("%u %d %.4f %.4f\n", m, n, ms[ms.size() / 2], ms[0]);
    }
  }
  std::fprintf(stderr, "checksum %ld\n", sink);
  return 0;
}
