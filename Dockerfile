# gitlb image: `docker build -t gitlb .` from this repository. Multi-stage: the build stage has the compilers
# (clang for the BPF objects, g++ and node-gyp for the libbpf addon, tsc); the runtime stage holds only what
# `gitlb run` needs: Node, libbpf, iproute2/ethtool/bpftool, the compiled tree and production node_modules.
FROM node:20-bookworm-slim AS build
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      clang llvm libbpf-dev libelf-dev zlib1g-dev pkg-config make g++ python3 \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY package.json package-lock.json .npmrc ./
RUN npm ci --no-audit --no-fund --loglevel=error
COPY . .
# The targets below `make build` minus `deps` (which installs Debian packages and mounts bpffs: not in an image).
RUN make bpf addon ts && npm prune --omit=dev --no-audit --no-fund --loglevel=error

FROM node:20-bookworm-slim AS runtime
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      libbpf1 libelf1 zlib1g iproute2 ethtool bpftool ca-certificates \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/gitlb
COPY --from=build /src/package.json /src/package-lock.json ./
COPY --from=build /src/bin ./bin
COPY --from=build /src/dist ./dist
COPY --from=build /src/schemas ./schemas
COPY --from=build /src/build/bpf ./build/bpf
COPY --from=build /src/src/bpf/napi/build/Release/gitlb_bpf.node ./src/bpf/napi/build/Release/gitlb_bpf.node
COPY --from=build /src/node_modules ./node_modules
ENV PATH=/opt/gitlb/bin:$PATH
# Runs as root inside the pod: the DaemonSet grants only CAP_BPF, CAP_NET_ADMIN, CAP_PERFMON and CAP_SYS_ADMIN.
ENTRYPOINT ["/opt/gitlb/bin/gitlb"]
CMD ["--help"]
