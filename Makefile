# caldrix: a plain Makefile. `make` builds build/libcaldrix.a, build/libcaldrix.so and build/caldrix.
# `make test` runs every test; `make SAN=1 test` the same under ASan+UBSan (in build-san/).
CC      ?= cc
PKGS    := libcurl libcrypto libmicrohttpd libpcre2-8 libutf8proc jansson libpng libjpeg sqlite3
# The sanitizers of every sanitizer build (SAN=1 and the fuzz targets): undefined behaviour stops
# the program as a memory error does (UBSan otherwise prints and goes on, and a run passes), and
# float-cast-overflow is named because GCC's "undefined" leaves it out (clang's includes it).
SAN_FLAGS := -fsanitize=address,undefined,float-cast-overflow -fno-sanitize-recover=all -fno-omit-frame-pointer
ifeq ($(SAN),1)
BUILD   ?= build-san
OPT     ?= -O1 -g $(SAN_FLAGS)
else
BUILD   ?= build
OPT     ?= -O2 -g
endif
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
# Open MPI, for a model split across ranks (src/engine/split.c; docs/models.md): built in when
# pkg-config finds ompi-c, else split.c compiles without it and says so when asked to split.
# `make MPI=0` leaves it out where it is installed.
ifneq ($(MPI),0)
ifeq ($(shell pkg-config --exists ompi-c 2>/dev/null && echo yes),yes)
PKG_CFLAGS += $(shell pkg-config --cflags ompi-c) -DCDX_HAVE_MPI
PKG_LIBS   += $(shell pkg-config --libs ompi-c)
endif
endif
CFLAGS  += $(OPT) -std=c11 -D_GNU_SOURCE -fPIC -pthread -Wall -Wextra -Wno-unused-parameter \
           -Iinclude -Isrc $(PKG_CFLAGS)
LDFLAGS += $(filter -fsanitize=%,$(OPT)) -pthread
LDLIBS  += $(PKG_LIBS) -lm

# Per-ISA kernel files are compiled with that ISA's flags; everything else stays baseline x86-64
# so the binary runs anywhere and picks kernels at run time. They also get -O3: their tiles index
# small register arrays in loops that only -O3 unrolls early enough to keep them in registers.
# Not under the sanitizers: there -O3 takes five times as long to compile them (minutes a file)
# and the tests run only ~15 % faster.
ifeq ($(SAN),1)
ISA_OPT :=
else
ISA_OPT := -O3
endif
ISA_avx2   := -mavx2 -mfma -mf16c $(ISA_OPT)
ISA_avx512 := -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx512bf16 -mavx512vbmi -mfma -mf16c -mavx2 $(ISA_OPT)
ISA_amx    := $(ISA_avx512) -mamx-tile -mamx-int8 -mamx-bf16

LAYERS  := base format image quant kernel model engine train text hub server
LIB_SRC := $(foreach l,$(LAYERS),$(wildcard src/$(l)/*.c)) $(wildcard src/model/arch/*.c)
CLI_SRC := $(wildcard src/cli/*.c)
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/%.o)
CLI_OBJ := $(CLI_SRC:%.c=$(BUILD)/%.o)
TEST_SRC := $(wildcard tests/*/test_*.c)
TEST_BIN := $(TEST_SRC:%.c=$(BUILD)/%)
FUZZ_SRC := $(wildcard fuzz/fuzz_*.c)

all: $(BUILD)/libcaldrix.a $(BUILD)/libcaldrix.so $(BUILD)/caldrix

$(BUILD)/%_avx2.o: EXTRA := $(ISA_avx2)
$(BUILD)/%_avx512.o: EXTRA := $(ISA_avx512)
$(BUILD)/%_amx.o: EXTRA := $(ISA_amx)
$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(EXTRA) -MMD -MP -c $< -o $@

# A file built into the binary as bytes between two symbols, NAME and NAME_end: $(call embed,NAME)
define embed
	@mkdir -p $(dir $@)
	printf '.section .rodata\n.global $(1)\n.global $(1)_end\n.balign 64\n$(1):\n.incbin "%s"\n$(1)_end:\n.section .note.GNU-stack,"",@progbits\n' "$(CURDIR)/$<" > $(@:.o=.s)
	$(CC) -c $(@:.o=.s) -o $@
endef

$(BUILD)/models/stories260K.o: models/stories260K.gguf
	$(call embed,cdx_embedded_model)

# The chat page `caldrix serve` answers at / (docs/api.md, "The chat page")
$(BUILD)/ui/chat.o: ui/chat.html
	$(call embed,cdx_embedded_page)

$(BUILD)/libcaldrix.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/libcaldrix.so: $(LIB_OBJ)
	$(CC) -shared $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/caldrix: $(CLI_OBJ) $(BUILD)/models/stories260K.o $(BUILD)/ui/chat.o $(BUILD)/libcaldrix.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/tests/%: tests/%.c $(BUILD)/libcaldrix.a tests/test.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests -o $@ $< $(BUILD)/libcaldrix.a $(LDFLAGS) $(LDLIBS)

# The corpus replay compiles the fuzz targets in.
$(BUILD)/tests/fuzz/test_corpus_replay: $(FUZZ_SRC)

tests: $(TEST_BIN)

deps:
	scripts/deps

# The main job: a short story from the default model (stories260K, embedded in the binary).
run: deps
	$(MAKE) all
	$(BUILD)/caldrix run $(if $(wildcard ../shared/models/stories260K/stories260K.gguf),../shared/models/stories260K/stories260K.gguf,models/stories260K.gguf) -p "Once upon a time" -n 120 --temp 0.8 --seed 42

# The browser the chat page's tests drive (tests/ui); where it cannot be installed they say so and skip.
test: deps
	scripts/deps chromium || echo "make test: chromium could not be installed: tests/ui will be skipped"
	$(MAKE) all tests
	BUILD=$(BUILD) $(if $(filter 1,$(SAN)),SAN=1) tests/run

# The whole suite again on each lesser kernel set this CPU has (the best set ran in `make test`).
test-isas: deps
	$(MAKE) all tests
	@best=$$($(BUILD)/caldrix doctor | sed -n 's/^  kernel set in use: \([a-z0-9]*\).*/\1/p'); \
	for isa in amx avx512 avx2 scalar; do \
	  if [ "$$isa" = "$$best" ]; then echo "test-isas: $$isa is the best set here (make test runs it)"; continue; fi; \
	  if ! CALDRIX_ISA=$$isa $(BUILD)/caldrix version >/dev/null 2>&1; then echo "test-isas: skipped $$isa: this CPU lacks it"; continue; fi; \
	  BUILD=$(BUILD) tests/run --isa $$isa || exit 1; \
	done

# Fuzz targets (clang + libFuzzer, ASan+UBSan): `make fuzz` builds build-fuzz/fuzz_NAME for each
# fuzz/fuzz_NAME.c; fuzz with build-fuzz/fuzz_NAME -max_total_time=60 fuzz/corpus/NAME (fuzz/README.md).
# `make fuzz-replay` runs every file of fuzz/corpus/NAME once through build-fuzz/fuzz_NAME.
# The targets link only the layers they reach (the kernels under ASan take minutes a file).
FUZZ_LAYERS := base format image quant text
FUZZ_OPT := -O1 -g $(SAN_FLAGS)
fuzz:
	$(MAKE) BUILD=build-fuzz CC=clang OPT="$(FUZZ_OPT) -fsanitize=fuzzer-no-link" build-fuzz/libcaldrix-fuzz.a
	@for f in $(FUZZ_SRC); do n=$$(basename $$f .c); \
	  echo clang $(FUZZ_OPT) -fsanitize=fuzzer $$f -o build-fuzz/$$n; \
	  clang $(FUZZ_OPT) -fsanitize=fuzzer -Iinclude -Isrc $(PKG_CFLAGS) $$f build-fuzz/libcaldrix-fuzz.a $(PKG_LIBS) -lm -pthread -o build-fuzz/$$n || exit 1; done

# (the config reader reads the family rows: src/model/arch.c and src/model/arch/*.c, data only)
$(BUILD)/libcaldrix-fuzz.a: $(patsubst %.c,$(BUILD)/%.o,$(foreach l,$(FUZZ_LAYERS),$(wildcard src/$(l)/*.c)) \
                              src/model/arch.c $(wildcard src/model/arch/*.c))
	@rm -f $@
	ar rcs $@ $^

fuzz-replay: fuzz
	@for f in $(FUZZ_SRC); do n=$$(basename $$f .c); t=$${n#fuzz_}; \
	  echo "fuzz-replay: $$n on fuzz/corpus/$$t ($$(ls fuzz/corpus/$$t | wc -l) files)"; \
	  build-fuzz/$$n fuzz/corpus/$$t/* >build-fuzz/$$n.replay.log 2>&1 || { tail -40 build-fuzz/$$n.replay.log; exit 1; }; done

clean:
	rm -rf build build-san build-fuzz

.PHONY: all tests test test-isas run deps fuzz fuzz-replay clean
-include $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d)
