# gitlb — every target works on a fresh Debian 12 machine as root.
SHELL := /bin/bash
.DEFAULT_GOAL := build

# python3-scapy builds other projects' packets at test time; python3-dpkt and python3-libtrace ship the sample
# captures the same test reads from their installed paths (test/netns/hostile-foreign.test.ts); frr is the lab's
# other upstream router (gitlb lab up --router frr, docs/lab.md)
DEB_PKGS := clang llvm libbpf-dev bpftool libelf-dev zlib1g-dev pkg-config iproute2 ethtool nftables \
            tcpdump iputils-ping netcat-openbsd curl git haproxy wrk make g++ python3 bird2 prometheus gnupg openssh-client \
            python3-scapy python3-dpkt python3-libtrace systemd frr
BPF_SRC  := $(wildcard src/bpf/progs/*.c)
BPF_HDR  := $(wildcard src/bpf/progs/*.h) $(wildcard src/bpf/include/*.h)
BPF_OBJ  := $(patsubst src/bpf/progs/%.c,build/bpf/%.o,$(BPF_SRC)) build/bpf/xdp_lb_capture.o build/bpf/tc_backend_capture.o
ADDON    := src/bpf/napi/build/Release/gitlb_bpf.node
ADDON_SRC := $(wildcard src/bpf/napi/*.cc src/bpf/napi/*.h src/bpf/napi/binding.gyp)
AVA_FLAGS ?=

.PHONY: deps build bpf addon ts test test-unit demo clean lab-clean bench install install-tree

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

# xdp_lb with packet capture for `gitlb capture` (docs/datapath.md, "Seeing what XDP does")
build/bpf/xdp_lb_capture.o: src/bpf/progs/xdp_lb.c $(BPF_HDR)
	@mkdir -p build/bpf
	clang -O2 -g -Wall -Werror -target bpf -DLB_CAPTURE -I/usr/include/x86_64-linux-gnu -Isrc/bpf/include -c $< -o $@

# tc_backend with packet capture for `gitlb capture` on backend nodes
build/bpf/tc_backend_capture.o: src/bpf/progs/tc_backend.c $(BPF_HDR)
	@mkdir -p build/bpf
	clang -O2 -g -Wall -Werror -target bpf -DBE_CAPTURE -I/usr/include/x86_64-linux-gnu -Isrc/bpf/include -c $< -o $@

build/bpf/%.o: src/bpf/progs/%.c $(BPF_HDR)
	@mkdir -p build/bpf
	clang -O2 -g -Wall -Werror -target bpf -I/usr/include/x86_64-linux-gnu -Isrc/bpf/include -c $< -o $@

addon: $(ADDON)

$(ADDON): $(ADDON_SRC)
	@if [ -f src/bpf/napi/binding.gyp ]; then cd src/bpf/napi && ../../../node_modules/.bin/node-gyp rebuild --nodedir=/usr --loglevel=warn; fi

ts:
	node_modules/.bin/tsc -p tsconfig.json
	@# tsc never deletes: drop outputs whose source was removed or moved (the CLI loads every file of
	@# dist/cli/commands/, so a stale one breaks it)
	@cd dist && find . -name '*.js' | while read -r f; do [ -e "../src/$${f%.js}.ts" ] || rm -f "$$f" "$$f.map"; done

# bin/gitlb (which tests run as a user would) runs tsc's output in dist/, so the tests need the whole build.
test: build
	node_modules/.bin/ava $(AVA_FLAGS)

# The unit tier: no root, no BPF, no namespaces, no child processes (test/unit/); seconds. In worker threads
# (ava.unit.config.mjs): a child process per test file cost more CPU to start than most files take to run.
test-unit: node_modules/.package-lock.json
	node_modules/.bin/ava --config ava.unit.config.mjs $(AVA_FLAGS)

demo: build
	bin/gitlb demo

# `make install`: the runtime tree under $(PREFIX) (compiled JS, BPF objects, the addon, schemas, production
# node_modules), the systemd unit, an environment file to fill in (kept when present) and /usr/local/bin/gitlb.
# DESTDIR stages it elsewhere (packaging, tests).
PREFIX ?= /opt/gitlb
SYSTEMD_DIR ?= /etc/systemd/system
RUNTIME := package.json package-lock.json bin dist schemas README.md docs
install: build install-tree

install-tree:
	@set -e; root="$(DESTDIR)$(PREFIX)"; mkdir -p "$$root"; \
	for d in $(RUNTIME) build src node_modules; do rm -rf "$$root/$$d"; done; \
	cp -a $(RUNTIME) "$$root/"; \
	mkdir -p "$$root/build/bpf" "$$root/src/bpf/napi/build/Release"; \
	cp build/bpf/*.o "$$root/build/bpf/"; cp $(ADDON) "$$root/src/bpf/napi/build/Release/"; \
	cp -a node_modules "$$root/"; (cd "$$root" && npm prune --omit=dev --no-audit --no-fund --loglevel=error >/dev/null); \
	install -D -m 0644 deploy/systemd/gitlb.service "$(DESTDIR)$(SYSTEMD_DIR)/gitlb.service"; \
	sed -i 's|/opt/gitlb|$(PREFIX)|g' "$(DESTDIR)$(SYSTEMD_DIR)/gitlb.service"; \
	[ -e "$(DESTDIR)/etc/gitlb/gitlb.env" ] || install -D -m 0600 deploy/systemd/gitlb.env "$(DESTDIR)/etc/gitlb/gitlb.env"; \
	mkdir -p "$(DESTDIR)/usr/local/bin" "$(DESTDIR)/var/lib/gitlb"; ln -sfn "$(PREFIX)/bin/gitlb" "$(DESTDIR)/usr/local/bin/gitlb"; \
	echo "installed gitlb in $$root; unit $(DESTDIR)$(SYSTEMD_DIR)/gitlb.service; settings $(DESTDIR)/etc/gitlb/gitlb.env"; \
	if [ -z "$(DESTDIR)" ] && command -v systemctl >/dev/null; then systemctl daemon-reload || true; fi

bench: build
	@for b in bench/*/run; do echo "== $$b"; $$b || exit 1; done

lab-clean:
	bin/gitlb lab clean

clean:
	rm -rf build dist src/bpf/napi/build
