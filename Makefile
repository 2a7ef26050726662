# gitlb — every target works on a fresh Debian 12 machine as root.
SHELL := /bin/bash
.DEFAULT_GOAL := build

DEB_PKGS := clang llvm libbpf-dev bpftool libelf-dev zlib1g-dev pkg-config iproute2 ethtool nftables \
            tcpdump iputils-ping netcat-openbsd curl git haproxy wrk make g++ python3 bird2 prometheus gnupg openssh-client
BPF_SRC  := $(wildcard src/bpf/progs/*.c)
BPF_HDR  := $(wildcard src/bpf/progs/*.h) $(wildcard src/bpf/include/*.h)
BPF_OBJ  := $(patsubst src/bpf/progs/%.c,build/bpf/%.o,$(BPF_SRC))
ADDON    := src/bpf/napi/build/Release/gitlb_bpf.node
ADDON_SRC := $(wildcard src/bpf/napi/*.cc src/bpf/napi/*.h src/bpf/napi/binding.gyp)
AVA_FLAGS ?=

.PHONY: deps build bpf addon ts test demo clean lab-clean bench

deps: node_modules/.package-lock.json
	@missing=""; for p in $(DEB_PKGS); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi
	@mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf || true

node_modules/.package-lock.json: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error

build: deps bpf addon ts

bpf: $(BPF_OBJ)

build/bpf/%.o: src/bpf/progs/%.c $(BPF_HDR)
	@mkdir -p build/bpf
	clang -O2 -g -Wall -Werror -target bpf -I/usr/include/x86_64-linux-gnu -Isrc/bpf/include -c $< -o $@

addon: $(ADDON)

$(ADDON): $(ADDON_SRC)
	@if [ -f src/bpf/napi/binding.gyp ]; then cd src/bpf/napi && ../../../node_modules/.bin/node-gyp rebuild --nodedir=/usr --loglevel=warn; fi

ts:
	node_modules/.bin/tsc -p tsconfig.json

test: build
	node_modules/.bin/ava $(AVA_FLAGS)

demo: build
	bin/gitlb demo

bench: build
	@for b in bench/*/run; do echo "== $$b"; $$b || exit 1; done

lab-clean:
	bin/gitlb lab clean

clean:
	rm -rf build dist src/bpf/napi/build
