# sluice - a Redis-protocol proxy.
#
#   make            build build/sluice
#   make run        install what is missing, build, run with conf/sluice.ini
#   make test       install what is missing, build, run unit + integration tests
#   make test SANITIZE=1   the same on an AddressSanitizer + UBSan build
#   make bench      benchmarks (numbers printed, never asserted)
#   make install    binary, man pages, docs, example configs, systemd unit
#                   (PREFIX=/usr/local, DESTDIR=; docs/operations.md)

PKGS      = libevent libevent_openssl hiredis inih libcrypto libssl
CC       ?= cc
OPT      ?= -O2
CFLAGS   += -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -g $(OPT) \
            $(INCLUDES) -I$(BUILD)/gen $(shell pkg-config --cflags $(PKGS))
LDLIBS   += $(shell pkg-config --libs $(PKGS)) -lm

ifeq ($(SANITIZE),1)
BUILD     = build/san
OPT       = -O1
CFLAGS   += -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
LDFLAGS  += -fsanitize=address,undefined
else
BUILD     = build
# Link-time optimisation: the layers keep one job per file, and the small
# functions the files of a layer share (client_role, client_output...) are
# inlined across them again, as when they were one file (callgrind: 2.7%
# fewer instructions per GET/SET than without it). Fat objects keep
# ordinary code beside the IR, which `nm` (tools/callgraph.py) reads.
# inline-unit-growth (GCC's default 40%): with the observability, sentinel
# and replica code the unit outgrew the default budget and GCC stopped
# inlining the request path's small functions across files (callgrind,
# GET/SET -c 50 -P 16: 3,864 instructions per request at 40, 3,353 at 80,
# 3,348 at 150; the binary grows 9%).
LTO      ?= -flto=auto -ffat-lto-objects --param=inline-unit-growth=80
CFLAGS   += $(LTO)
LDFLAGS  += $(LTO)
endif

# proxy/ is in folders by layer, lowest first (proxy/layers.txt); each
# folder's headers are included by name.
LAYER_DIRS = $(sort $(dir $(wildcard proxy/*/*.c)))
INCLUDES  = -Iproxy $(patsubst %/,-I%,$(LAYER_DIRS)) -Irules
HEADERS   = $(wildcard proxy/*.h proxy/*/*.h rules/*.h)
SRCS      = $(wildcard proxy/*.c proxy/*/*.c rules/*.c)
LIB_OBJS  = $(patsubst %.c,$(BUILD)/obj/%.o,$(filter-out proxy/main.c,$(SRCS))) $(BUILD)/obj/gen/lua_scripts.o
MAIN_OBJ  = $(BUILD)/obj/proxy/main.o
# Unit tests sit in tests/unit/ in the folders of the layers they test;
# their binaries go flat into $(BUILD)/unit/.
UNIT_DIRS = $(sort $(dir $(wildcard tests/unit/*/test_*.c)))
UNIT_SRCS = $(wildcard tests/unit/*/test_*.c)
UNIT_BINS = $(addprefix $(BUILD)/unit/,$(notdir $(basename $(UNIT_SRCS))))
UNIT_INCS = -Itests/unit $(patsubst %/,-I%,$(UNIT_DIRS))
vpath test_%.c $(UNIT_DIRS)
LUA       = $(sort $(wildcard lua/*.lua))

.PHONY: all deps run test unit-bins bench clean prune-objs install FORCE
all: $(BUILD)/sluice

deps:
	@tools/deps.sh

$(BUILD)/sluice: $(MAIN_OBJ) $(LIB_OBJS)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# What `sluice --version` prints of the build (commit, day, compiler):
# regenerated on every make, rewritten only when it changed.
$(MAIN_OBJ): $(BUILD)/gen/build_info.h
$(BUILD)/gen/build_info.h: FORCE
	@tools/build_info.sh $@ "$(CC)"
FORCE:

$(BUILD)/obj/%.o: %.c $(HEADERS) $(BUILD)/gen/lua_scripts.h
	@mkdir -p $(dir $@)
	@echo "  CC $<"; $(CC) $(CFLAGS) -c -o $@ $<

# Lua scripts are compiled into the binary as C strings.
$(BUILD)/gen/lua_scripts.c $(BUILD)/gen/lua_scripts.h &: $(LUA) tools/embed_lua.sh
	@mkdir -p $(BUILD)/gen
	tools/embed_lua.sh $(BUILD)/gen $(LUA)

$(BUILD)/obj/gen/lua_scripts.o: $(BUILD)/gen/lua_scripts.c $(BUILD)/gen/lua_scripts.h
	@mkdir -p $(dir $@)
	@echo "  CC $<"; $(CC) $(CFLAGS) -c -o $@ $<

$(BUILD)/unit/%: %.c $(wildcard tests/unit/*.h tests/unit/*/*.h) $(LIB_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(UNIT_INCS) $(LDFLAGS) -o $@ $< $(LIB_OBJS) $(LDLIBS)

run: deps
	@$(MAKE) --no-print-directory all
	tools/run.sh $(BUILD)/sluice conf/sluice.ini

test: deps
	@$(MAKE) --no-print-directory all unit-bins $(TEST_MODULE) prune-objs
	tools/test.sh $(BUILD)

# Objects of sources that moved or went: the layer check reads every
# object in $(BUILD)/obj, so a stale one would be judged too.
prune-objs:
	@for o in $$(find $(BUILD)/obj -name '*.o' 2>/dev/null); do \
	    case " $(LIB_OBJS) $(MAIN_OBJ) " in *" $$o "*) ;; *) rm -f "$$o";; esac; \
	done

unit-bins: $(UNIT_BINS)

bench: deps
	@$(MAKE) --no-print-directory all $(BUILD)/lockbench $(BUILD)/respbench
	tools/bench.sh $(BUILD)/sluice $(BUILD)/lockbench $(BUILD)/respbench

# The lock benchmark's client (a tool, not part of sluice).
$(BUILD)/lockbench: tools/lockbench.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(LDLIBS)

# The RESP2/RESP3 GET/SET benchmark's client (redis-benchmark has no RESP3).
$(BUILD)/respbench: tools/respbench.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(LDLIBS)

# The Redis module the integration tests load into redis-server (next to
# the sluice binary they test). Never sanitized: redis-server is not.
TEST_MODULE = $(BUILD)/sluicetest.so
$(TEST_MODULE): tests/modules/sluicetest.c
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -Wall -Wextra -Werror -g -O2 -shared -fPIC -o $@ $<

clean:
	rm -rf build

# make install [PREFIX=/usr/local] [DESTDIR=] [INSTALL_BIN=$(BUILD)/sluice]:
# the example configs go to $(PREFIX)/share/sluice, never to /etc/sluice
# (an operator's files); the unit names $(BINDIR)/sluice. The docs keep
# README's layout (README.md beside docs/) so their links work installed.
PREFIX     ?= /usr/local
BINDIR      = $(PREFIX)/bin
MANDIR      = $(PREFIX)/share/man
DATADIR     = $(PREFIX)/share/sluice
DOCDIR      = $(PREFIX)/share/doc/sluice
UNITDIR    ?= $(PREFIX)/lib/systemd/system
INSTALL_BIN ?= $(BUILD)/sluice

install: $(INSTALL_BIN)
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(MANDIR)/man5 $(DESTDIR)$(MANDIR)/man7 \
	    $(DESTDIR)$(MANDIR)/man8 $(DESTDIR)$(DATADIR) $(DESTDIR)$(UNITDIR) $(DESTDIR)$(DOCDIR)/docs
	install -m 755 $(INSTALL_BIN) $(DESTDIR)$(BINDIR)/sluice
	install -m 644 conf/sluice.8 $(DESTDIR)$(MANDIR)/man8/sluice.8
	install -m 644 conf/sluice.ini.5 conf/sluice-rules.5 conf/sluice-users.5 $(DESTDIR)$(MANDIR)/man5/
	install -m 644 conf/sluice-commands.7 $(DESTDIR)$(MANDIR)/man7/
	install -m 644 README.md CHANGELOG.md $(DESTDIR)$(DOCDIR)/
	install -m 644 docs/*.md $(DESTDIR)$(DOCDIR)/docs/
	install -m 644 conf/sluice.ini conf/rules.ini conf/users.ini conf/grafana-dashboard.json \
	    conf/prometheus-alerts.yml $(DESTDIR)$(DATADIR)/
	sed 's|@BINDIR@|$(BINDIR)|g' conf/sluice.service.in >$(DESTDIR)$(UNITDIR)/sluice.service
	chmod 644 $(DESTDIR)$(UNITDIR)/sluice.service

# Fuzzing (tests/fuzz, docs/operations.md "Fuzzing"): libFuzzer targets built with
# clang, ASan and UBSan into build/fuzz, apart from the builds above.
#   make fuzz                   build, then run each target FUZZ_SECONDS
#   make fuzz-bins              build only
#   make fuzz FUZZ_TARGETS=fuzz_reqparse FUZZ_SECONDS=600
# .ci/run runs `make fuzz`: each target 60 s.
FUZZ_BUILD    = build/fuzz
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 60
FUZZ_SAN      = -fsanitize=address,undefined -fno-sanitize-recover=undefined
# -Werror only on the targets: the gcc builds hold the library to it, and a
# warning only clang gives must not stop the fuzzing.
FUZZ_CFLAGS   = -std=c11 -D_GNU_SOURCE -Wall -Wextra -g -O1 -fno-omit-frame-pointer \
                $(FUZZ_SAN) $(INCLUDES) -Itests/fuzz $(UNIT_INCS) -I$(FUZZ_BUILD)/gen \
                $(shell pkg-config --cflags $(PKGS))
FUZZ_LIB_OBJS = $(patsubst %.c,$(FUZZ_BUILD)/obj/%.o,$(filter-out proxy/main.c,$(SRCS))) \
                $(FUZZ_BUILD)/obj/gen/lua_scripts.o
FUZZ_ALL      = fuzz_reqparse fuzz_respframe fuzz_config fuzz_rules
FUZZ_TARGETS ?= $(FUZZ_ALL)

.PHONY: fuzz fuzz-deps fuzz-bins
fuzz: fuzz-deps
	@$(MAKE) --no-print-directory fuzz-bins FUZZ_TARGETS="$(FUZZ_TARGETS)"
	tests/fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_SECONDS) $(FUZZ_TARGETS)

fuzz-deps:
	@tools/deps.sh
	@tests/fuzz/deps.sh

fuzz-bins: $(patsubst %,$(FUZZ_BUILD)/%,$(FUZZ_TARGETS))

# Reached only through the pattern rule below, yet worth keeping.
.SECONDARY: $(FUZZ_LIB_OBJS)

$(FUZZ_BUILD)/fuzz_%: tests/fuzz/fuzz_%.c $(wildcard tests/fuzz/*.h tests/unit/*.h tests/unit/*/*.h) $(FUZZ_LIB_OBJS)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -Werror -fsanitize=fuzzer -o $@ $< $(FUZZ_LIB_OBJS) $(LDLIBS)

$(FUZZ_BUILD)/obj/%.o: %.c $(HEADERS) $(FUZZ_BUILD)/gen/lua_scripts.h
	@mkdir -p $(dir $@)
	@echo "  CC $< (fuzz)"; $(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c -o $@ $<

$(FUZZ_BUILD)/gen/lua_scripts.c $(FUZZ_BUILD)/gen/lua_scripts.h &: $(LUA) tools/embed_lua.sh
	@mkdir -p $(FUZZ_BUILD)/gen
	tools/embed_lua.sh $(FUZZ_BUILD)/gen $(LUA)

$(FUZZ_BUILD)/obj/gen/lua_scripts.o: $(FUZZ_BUILD)/gen/lua_scripts.c $(FUZZ_BUILD)/gen/lua_scripts.h
	@mkdir -p $(dir $@)
	@echo "  CC $< (fuzz)"; $(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c -o $@ $<
