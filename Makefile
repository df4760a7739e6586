# longattn: GNU Make only.  `make` builds every tool; optional dependencies
# (CUDA, NCCL, cuDNN, PMIx, hwloc, MPI) are found by *_HOME or pkg-config,
# and a missing one disables only the files that need it.
#
# Which files need what, by name:
#   *.cu, *_cuda.c   CUDA        *_nccl.c   NCCL      *cudnn.c   cuDNN
#   *_pmix.c         PMIx        *_hwloc.c  hwloc     *_mpi.c    MPI
#   kernels/hopper.cu (with the hopper_*.cuh it includes) is built for sm_90a alone.

PREFIX    ?= /usr/local
DESTDIR   ?=
CC        ?= cc
CUDA_HOME ?= /usr/local/cuda
NCCL_HOME ?= $(if $(wildcard $(CUDA_HOME)/include/nccl.h),$(CUDA_HOME),/usr)
# cuDNN: the toolkit's copy, else Debian/Ubuntu's (headers under the multiarch
# include dir); a pip wheel's directory works too (it lacks libcudnn.so, so
# the library is named by its soname).
CUDNN_HOME ?= $(if $(wildcard $(CUDA_HOME)/include/cudnn.h),$(CUDA_HOME),/usr)
PKG_CONFIG ?= pkg-config
B := build
# the rule for kernels/table.c.o below comes first: `make` alone must be all
.DEFAULT_GOAL := all

VERSION := 0.1
# rules for objects come before `all' below: a bare `make' builds the tools
.DEFAULT_GOAL := all
# COMMIT=hash in the environment wins: a copy whose git state lags (the
# device's) would name another commit in every result row.  A tree whose
# tracked files differ from HEAD says so (HASH-dirty): its rows are not
# HEAD's.
ifeq ($(origin COMMIT),undefined)
COMMIT := $(shell h=$$(git rev-parse --short=12 HEAD 2>/dev/null) && \
	{ git diff --quiet HEAD -- 2>/dev/null && echo $$h || echo $$h-dirty; } || \
	cat .commit 2>/dev/null || echo unknown)
endif
CFLAGS   ?= -O2
CFLAGS   += -std=c11 -Wall -Wextra -Werror -pthread
CPPFLAGS += -D_GNU_SOURCE -Ilib -Ikernels -Imasks -DCOMMIT='"$(COMMIT)"' -DLONGATTN_VERSION='"$(VERSION)"' \
            -DDATADIR='"$(PREFIX)/share/longattn"' -DSRCDIR='"$(CURDIR)"'
LDLIBS   += -lm -lpthread

# ---- optional dependencies ------------------------------------------------
have = $(if $(wildcard $(1)),yes,)
NVCC := $(if $(wildcard $(CUDA_HOME)/bin/nvcc),$(CUDA_HOME)/bin/nvcc,)
HAVE_CUDA  := $(if $(NVCC),yes,)
HAVE_NCCL  := $(if $(HAVE_CUDA),$(call have,$(NCCL_HOME)/include/nccl.h),)
CUDNN_INC  := $(firstword $(dir $(wildcard $(CUDNN_HOME)/include/cudnn.h $(CUDNN_HOME)/include/*-linux-gnu/cudnn.h)))
CUDNN_LIBD := $(firstword $(dir $(wildcard $(CUDNN_HOME)/lib64/libcudnn.so* $(CUDNN_HOME)/lib/libcudnn.so* $(CUDNN_HOME)/lib/*-linux-gnu/libcudnn.so*)))
CUDNN_LIB  := $(if $(wildcard $(CUDNN_LIBD)libcudnn.so),-lcudnn,-l:libcudnn.so.9)
HAVE_CUDNN := $(if $(HAVE_CUDA),$(if $(and $(CUDNN_INC),$(CUDNN_LIBD)),yes),)
HAVE_PMIX  := $(shell $(PKG_CONFIG) --exists pmix 2>/dev/null && echo yes)
HAVE_HWLOC := $(shell $(PKG_CONFIG) --exists hwloc 2>/dev/null && echo yes)
HAVE_MPI   := $(shell $(PKG_CONFIG) --exists ompi-c 2>/dev/null && echo yes)

NOT :=
ifeq ($(HAVE_CUDA),yes)
  CPPFLAGS += -DHAVE_CUDA -I$(CUDA_HOME)/include
  LDLIBS   += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublas -lcudart -lstdc++
  GENCODE  ?= -gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90a,code=sm_90a
  NVCCFLAGS ?= -O3 -std=c++17 -lineinfo
  NVCCFLAGS += -Xcompiler -Wall,-Wextra -Ilib -Ikernels -Imasks -DHAVE_CUDA
else
  NOT += %.cu %_cuda.c
  $(info make: no CUDA at $(CUDA_HOME) (set CUDA_HOME): GPU kernels and the NCCL backend disabled)
endif
ifeq ($(HAVE_NCCL),yes)
  CPPFLAGS += -DHAVE_NCCL -I$(NCCL_HOME)/include
  LDLIBS   += -L$(NCCL_HOME)/lib64 -Wl,-rpath,$(NCCL_HOME)/lib64 -lnccl
else
  NOT += %_nccl.c
  $(if $(HAVE_CUDA),$(info make: no NCCL under $(NCCL_HOME) (set NCCL_HOME): cpbench --backend nccl disabled))
endif
ifeq ($(HAVE_CUDNN),yes)
  CPPFLAGS += -DHAVE_CUDNN -I$(CUDNN_INC)
  LDLIBS   += -L$(CUDNN_LIBD) -Wl,-rpath,$(CUDNN_LIBD) $(CUDNN_LIB)
else
  NOT += %cudnn.c
  $(if $(HAVE_CUDA),$(info make: no cuDNN under $(CUDNN_HOME) (set CUDNN_HOME): kernel cudnn disabled))
endif
ifeq ($(HAVE_PMIX),yes)
  CPPFLAGS += -DHAVE_PMIX $(shell $(PKG_CONFIG) --cflags pmix)
  LDLIBS   += $(shell $(PKG_CONFIG) --libs pmix)
else
  NOT += %_pmix.c
  $(info make: no PMIx (libpmix-dev): cpbench runs as a single rank only)
endif
ifeq ($(HAVE_HWLOC),yes)
  CPPFLAGS += -DHAVE_HWLOC $(shell $(PKG_CONFIG) --cflags hwloc)
  LDLIBS   += $(shell $(PKG_CONFIG) --libs hwloc)
else
  NOT += %_hwloc.c
  $(info make: no hwloc (libhwloc-dev): cpbench does not bind ranks)
endif
ifeq ($(HAVE_MPI),yes)
  CPPFLAGS += -DHAVE_MPI $(shell $(PKG_CONFIG) --cflags ompi-c)
  LDLIBS   += $(shell $(PKG_CONFIG) --libs ompi-c)
else
  NOT += %_mpi.c
  $(info make: no MPI (libopenmpi-dev): cpbench --backend mpi disabled)
endif

# The --version line of every tool: this build's features, and a stamp whose
# name changes with the commit, version or features, so what prints them is
# rebuilt then.
FEATURES := $(or $(strip $(if $(HAVE_CUDA),cuda) $(if $(HAVE_NCCL),nccl) $(if $(HAVE_CUDNN),cudnn) \
              $(if $(HAVE_PMIX),pmix) $(if $(HAVE_HWLOC),hwloc) $(if $(HAVE_MPI),mpi)),none)
CPPFLAGS += -DLONGATTN_FEATURES='"$(FEATURES)"'
VSTAMP   := $(B)/.version-$(VERSION)-$(COMMIT)-$(subst $() ,+,$(FEATURES))
# made while reading this file: .SECONDARY would let a missing stamp go
# unnoticed as an intermediate file
$(shell mkdir -p $(B) && { test -e '$(VSTAMP)' || { rm -f $(B)/.version-*; touch '$(VSTAMP)'; }; })
SUBST     = sed -e 's|@VERSION@|$(VERSION)|' -e 's|@COMMIT@|$(COMMIT)|' -e 's|@FEATURES@|$(FEATURES)|'

# ---- sources ---------------------------------------------------------------
LIBSRC  := $(filter-out $(NOT),$(wildcard lib/*.c lib/*.cu lib/cp/*.c lib/cp/*.cu masks/*.c kernels/*.c kernels/*.cu))
LIBOBJ  := $(patsubst %,$(B)/%.o,$(LIBSRC))
# kernels/table.c lists a kernel's symbol only once its file is in the build.
KERNS   := $(basename $(notdir $(filter kernels/naive.cu kernels/flash.cu kernels/hopper.cu kernels/cudnn.c,$(LIBSRC))))
KERNDEF := $(shell echo $(KERNS) | tr a-z A-Z)
CPPFLAGS += $(addprefix -DHAVE_KERN_,$(KERNDEF))
$(B)/kernels/table.c.o: $(filter kernels/naive.cu kernels/flash.cu kernels/hopper.cu kernels/cudnn.c,$(LIBSRC))
TOOLS   := seqsample maskgen kbench cpbench
SCRIPTS := summarize kbench-torch
BINS    := $(addprefix bin/,$(TOOLS) $(SCRIPTS))
UNIT    := $(patsubst tests/unit/%.c,$(B)/tests/%,$(wildcard tests/unit/*.c))
HDRS    := $(wildcard lib/*.h lib/cp/*.h kernels/*.h masks/*.h)

all: $(BINS)

$(B)/%.c.o: %.c $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c -o $@ $<

$(B)/kernels/hopper.cu.o: kernels/hopper.cu $(wildcard kernels/*.cuh) $(HDRS)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -gencode=arch=compute_90a,code=sm_90a -c -o $@ $<

$(B)/kernels/flash.cu.o: kernels/tile.cuh

$(B)/%.cu.o: %.cu $(HDRS)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) $(GENCODE) -c -o $@ $<

$(B)/liblongattn.a: $(LIBOBJ)
	@rm -f $@
	ar rcs $@ $^

bin/%: $(B)/bin/%.c.o $(B)/liblongattn.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

$(B)/lib/util.c.o: $(VSTAMP)

bin/summarize: bin/summarize.sh $(VSTAMP)
	$(SUBST) -e 's|@AWKDIR@|$(CURDIR)/awk|' $< > $@.tmp && chmod +x $@.tmp && mv $@.tmp $@

# Python 3 and torch at run time only: the C tools never need it.
bin/kbench-torch: bin/kbench_torch.py
	sed 's|@COMMIT@|$(COMMIT)|' $< > $@.tmp && chmod +x $@.tmp && mv $@.tmp $@

$(B)/tests/%: tests/unit/%.c $(B)/liblongattn.a
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -Itests/unit $(CFLAGS) -o $@ $^ $(LDLIBS)

# ---- the jobs ----------------------------------------------------------------
deps:
	@sh .ci/deps.sh

demo: deps
	@$(MAKE) --no-print-directory all
	@sh bench/demo.sh

check: deps
	@$(MAKE) --no-print-directory all $(UNIT)
	@sh tests/run.sh

lint:
	mandoc -T lint -W warning man/man1/*.1 man/man5/*.5 man/man7/*.7
	cppcheck -q --error-exitcode=1 --enable=warning,portability --inline-suppr \
	    --suppress=missingIncludeSystem -D_GNU_SOURCE -Ilib -Ikernels -Imasks lib masks kernels bin

# every libFuzzer harness (tests/fuzz/*_fuzz.c) for FUZZ_SECONDS each;
# FUZZ_JOBS=2 runs two at a time
FUZZ_SECONDS ?= 60
fuzz:
	@sh tests/fuzz/run.sh $(FUZZ_SECONDS)

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/longattn/awk \
	    $(DESTDIR)$(PREFIX)/share/longattn/sbatch $(DESTDIR)$(PREFIX)/share/longattn/dists \
	    $(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(PREFIX)/share/man/man5 \
	    $(DESTDIR)$(PREFIX)/share/man/man7
	install -m 755 $(addprefix bin/,$(TOOLS)) $(DESTDIR)$(PREFIX)/bin
	$(SUBST) -e 's|@AWKDIR@|$(PREFIX)/share/longattn/awk|' bin/summarize.sh > $(DESTDIR)$(PREFIX)/bin/summarize
	chmod 755 $(DESTDIR)$(PREFIX)/bin/summarize
	sed 's|@COMMIT@|$(COMMIT)|' bin/kbench_torch.py > $(DESTDIR)$(PREFIX)/bin/kbench-torch
	chmod 755 $(DESTDIR)$(PREFIX)/bin/kbench-torch
	install -m 644 awk/*.awk $(DESTDIR)$(PREFIX)/share/longattn/awk
	install -m 644 sbatch/*.sbatch $(DESTDIR)$(PREFIX)/share/longattn/sbatch
	install -m 644 masks/dists/*.tsv $(DESTDIR)$(PREFIX)/share/longattn/dists
	install -m 644 man/man1/*.1 $(DESTDIR)$(PREFIX)/share/man/man1
	install -m 644 man/man5/*.5 $(DESTDIR)$(PREFIX)/share/man/man5
	install -m 644 man/man7/*.7 $(DESTDIR)$(PREFIX)/share/man/man7

clean:
	rm -rf $(B) $(addprefix bin/,$(TOOLS) $(SCRIPTS))

config:
	@echo "cuda=$(HAVE_CUDA) nccl=$(HAVE_NCCL) cudnn=$(HAVE_CUDNN) pmix=$(HAVE_PMIX) hwloc=$(HAVE_HWLOC) mpi=$(HAVE_MPI)"

.PHONY: all deps demo check lint fuzz install clean config
.SECONDARY:
