# One entry point for everything: `make run` (the main job, locally) and `make test`.
# Both create .venv from the pinned lock file when it is missing or stale.

PYTHON_BOOTSTRAP ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run run-imagenet tensorboard test fuzz test-images lint bench lock clean venv build push cloudbuild check-job submit \
        submit-vertex submit-gke local-run standin-base bench-images repository lock-dev lock-images sbom \
        pin-bases standin-pins help vertex-status vertex-logs vertex-cancel rehearse-container \
        rehearse-env rehearse-stop

# `make` alone lists the targets (make help).
.DEFAULT_GOAL := help

# --- image and job settings (override on the command line: make build PROJECT=p RUNTIME=pjrt)
# The base of each profile; an XRT base must match the TPU node's runtime (jobspec/images.py).
# pjrt (Vertex AI, GKE, TPU VMs) by default: xrt is for legacy AI Platform, which has taken no
# new jobs since 2025-01-31 (make submit names the xrt image by itself).
RUNTIME ?= pjrt
BASE_IMAGE_xrt := gcr.io/tpu-pytorch/xla:r1.11_3.7
BASE_IMAGE_pjrt := us-central1-docker.pkg.dev/tpu-pytorch-releases/docker/xla:r2.9.0_3.10_tpuvm
BASE_IMAGE ?= $(BASE_IMAGE_$(RUNTIME))
PROJECT ?=
# The job's region (and Cloud Build's).
REGION ?= us-central1
# Artifact Registry (Container Registry stopped taking pushes on 2025-03-18): `make repository`
# creates REPOSITORY once; IMAGE_URI=gcr.io/... still works where gcr.io does. The registry's
# region is its own variable: a job submitted with another REGION still finds the image that
# `make push` pushed (one image serves jobs in every region).
IMAGE_REGION ?= us-central1
REPOSITORY ?= pytorch-xla
IMAGE_NAME ?= pytorch-xla-trainer
TAG ?= $(RUNTIME)
IMAGE_URI ?= $(IMAGE_REGION)-docker.pkg.dev/$(PROJECT)/$(REPOSITORY)/$(IMAGE_NAME):$(TAG)
JOB_NAME ?= pytorch_xla_$(shell date +%Y%m%d_%H%M%S)
JOB_NAME := $(JOB_NAME)
VERTEX_CONFIG ?= config/vertex-tpu-v5e.yaml
# The job template of RUNTIME's platform (make check-job alone; each submit target sets its own).
CONFIG_xrt := config/ai-platform-tpu-v3.yaml
CONFIG_pjrt = $(VERTEX_CONFIG)
CONFIG ?= $(CONFIG_$(RUNTIME))
JOB_DIR ?=
# Vertex AI: the job's output directory (gs://BUCKET/DIR), which the Vertex templates require:
# the container gets AIP_MODEL_DIR, AIP_CHECKPOINT_DIR and AIP_TENSORBOARD_LOG_DIR under it.
BASE_OUTPUT_DIR ?=
# The trainer's arguments, written as for a shell (quotes and backslashes; no expansions): they
# reach the trainer's argv word for word on both paths (`python -m jobspec` splits them).
# Taken as written ($(value)): make must not expand a `$` in them either.
JOB_ARGS ?=
override JOB_ARGS := $(value JOB_ARGS)
export JOB_ARGS
RENDERED := build/$(JOB_NAME).yaml
DOCKER ?= docker
GCLOUD ?= gcloud
# The platform variables of `make local-run`: for xrt a TF_CONFIG like the seed's and a TPU_CONFIG
# naming TPU_NODE in TPU_ZONE of PROJECT (LOCAL_TPU_CONFIG replaces it whole), for pjrt
# Vertex AI's CLUSTER_SPEC.
LOCAL_TF_CONFIG ?= {"cluster":{"master":["127.0.0.1:2222"]},"environment":"cloud","task":{"type":"master","index":0}}
TPU_ZONE ?= us-central1-b
TPU_NODE ?=
LOCAL_TPU_CONFIG ?= {"project": "$(PROJECT)", "zone": "$(TPU_ZONE)", "tpu_node_name": "$(TPU_NODE)"}
# Vertex AI's variable for a CPU worker pool (the container sees no TPU chips here).
LOCAL_CLUSTER_SPEC ?= {"cluster":{"workerpool0":["localhost:2222"]},"environment":"cloud","task":{"type":"workerpool0","index":0,"trial":""},"job":{"workerPoolSpecs":[{"machineSpec":{"machineType":"n1-standard-4"},"replicaCount":"1"}]}}

comma := ,
# The target named in its hint is the one typed: check-job's PROJECT, required by make
# submit-vertex, says "make submit-vertex PROJECT=..." (REQUIRED_BY, set by the submit targets
# for their prerequisites).
require = $(if $(strip $($(1))),,$(error $(1) is not set: make $(or $(REQUIRED_BY),$@) $(1)=...))
check_runtime = $(if $(filter xrt pjrt,$(RUNTIME)),,$(error RUNTIME must be xrt or pjrt, got '$(RUNTIME)'))

# $(VENV)/gcs2: the xrt image's google-cloud-storage 2.x, an overlay the tests put first on
# PYTHONPATH to run the trainer against both majors the images ship (tests/trainer).
# The first install takes minutes (torch's CUDA libraries: about 7 GB): a line per phase, and
# pip's own line per package with its download's size, so that it is never silent that long.
PIP_INSTALL := $(PY) -m pip install --no-cache-dir --disable-pip-version-check
venv_phase = @echo "make: $(VENV): $(1)"
# A first install peaks at about 14 GB: torch's CUDA libraries take about 9 GB installed while
# pip still holds their wheels (about 5 GB) in its temporary folder. With less free, stop before
# pip starts, in one line, rather than with pip's "No space left on device" minutes in. The disk
# is the one the venv goes on (its nearest folder that exists).
VENV_DISK_GB ?= 14
define venv_disk_check
@ls -d $(VENV)/lib/python*/site-packages/torch >/dev/null 2>&1 || { \
	dir=$$(dirname $(VENV)); while [ ! -d "$$dir" ]; do dir=$$(dirname "$$dir"); done; \
	free_kb=$$(df -Pk "$$dir" | awk 'NR == 2 {print $$4}'); \
	[ "$${free_kb:-0}" -ge $$(( $(VENV_DISK_GB) * 1048576 )) ] || { \
	echo "make: $(VENV): the disk has $$(( $${free_kb:-0} / 1048576 )) GB free, a first install needs" \
	"about $(VENV_DISK_GB) GB (torch's CUDA libraries); HINT: free space (make rehearse-stop says" \
	"how much the rehearsal's Docker engine holds)" >&2; exit 1; }; }
endef
$(STAMP): requirements/dev.lock pyproject.toml requirements/image-xrt.txt
	$(call venv_phase,installing the pinned environment (once, and again when a lock changes))
	$(venv_disk_check)
	test -x $(PY) || $(PYTHON_BOOTSTRAP) -m venv $(VENV)
	$(call venv_phase,1/3: the $(shell grep -cE '^[A-Za-z0-9][^ ]*==' requirements/dev.lock) packages \
		of requirements/dev.lock$(comma) each hash checked (torch from PyPI brings about 7 GB \
		of CUDA libraries: minutes on a fast network))
	$(PIP_INSTALL) --require-hashes --no-deps -r requirements/dev.lock
	$(call venv_phase,2/3: this project$(comma) editable)
	$(PIP_INSTALL) --quiet --no-deps -e .
	$(call venv_phase,3/3: google-cloud-storage 2.x in $(VENV)/gcs2 (the xrt image's$(comma) for the tests))
	rm -rf $(VENV)/gcs2 && $(PIP_INSTALL) --quiet --no-deps --target $(VENV)/gcs2 \
		$$(grep '^google-cloud-storage==' requirements/image-xrt.txt)
	touch $@
	$(call venv_phase,ready)

# The data workers' cropped JPEG decoder (trainer/data/_jpeg_region.c), built for the venv's
# Python by the same script as in the pjrt image (imagebuild/jpeg_region.py; warnings are
# errors here). Without a C compiler or libjpeg-turbo's headers it is not built: one line
# says so (the compiler's output in $(VENV)/jpeg-region.log), simplejpeg decodes whole images
# (the trainer's start-up line names the decoder), and the next make tries again.
JPEG_REGION_STAMP := $(VENV)/.jpeg-region
$(JPEG_REGION_STAMP): trainer/data/_jpeg_region.c imagebuild/jpeg_region.py $(STAMP)
	@if $(PY) imagebuild/jpeg_region.py trainer/data/_jpeg_region.c trainer/data --strict \
		> $(VENV)/jpeg-region.log 2>&1; then tail -1 $(VENV)/jpeg-region.log && touch $@; \
	else echo "make: the region JPEG decoder is not built, simplejpeg decodes whole images:" \
		"$$(tail -1 $(VENV)/jpeg-region.log)"; fi
VENV_READY := $(STAMP) $(JPEG_REGION_STAMP)

## venv: create .venv from the pinned lock (make run and make test do it when needed).
venv: $(VENV_READY)

## run: the main job locally: the launcher detects "no platform", picks the XLA CPU device
## and execs the MNIST trainer on the shipped real-digit sample (data/mnist-sample: 2,000
## training and 500 test digits; 5 epochs, about 15 s), printing its test accuracy; outputs in
## runs/mnist-DATE. RUN_ARGS come after the defaults, so they add or override one flag each
## (RUN_ARGS=--num_epochs=1); RUN_ARGS=--smoke is a smoke run (one step, one evaluation
## batch, every output: seconds). Ctrl-C checkpoints and names the command that resumes the run.
RUN_DEFAULTS = --data_dir=data/mnist-sample --log_steps=10 --job-dir=runs/mnist-$$(date +%Y%m%d-%H%M%S)
RUN_ARGS ?=
# How the trainer names the command that resumes a stopped run (trainer/restart.py).
run: export RESUME_WITH = make run RUN_ARGS
run: export RESUME_ARGS = $(RUN_ARGS)
run: $(VENV_READY)
	$(PY) -m launcher -- $(RUN_DEFAULTS) $(RUN_ARGS)

## run-imagenet: the ImageNet trainer locally, through the launcher as on a platform
## (--trainer 'python -m trainer.imagenet'), on a small class-folder tree made once by
## data/make_imagenet_sample.py in build/imagenet-sample (4 classes of synthetic JPEGs):
## ResNet-18 at 32 px, 2 epochs; outputs in runs/imagenet-DATE. IMAGENET_ARGS come after the
## defaults (IMAGENET_ARGS=--data_dir=DIR for a train/ and val/ tree or shards of your own).
IMAGENET_SAMPLE := build/imagenet-sample
IMAGENET_DEFAULTS = --data_dir=$(IMAGENET_SAMPLE) --model=resnet18 --image_size=32 --lr_batch=0 \
	--batch_size=16 --num_epochs=2 --warmup_epochs=0 --log_steps=4 \
	--job-dir=runs/imagenet-$$(date +%Y%m%d-%H%M%S)
IMAGENET_ARGS ?=
run-imagenet: export RESUME_WITH = make run-imagenet IMAGENET_ARGS
run-imagenet: export RESUME_ARGS = $(IMAGENET_ARGS)
run-imagenet: $(VENV_READY)
	test -d $(IMAGENET_SAMPLE) || $(PY) data/make_imagenet_sample.py $(IMAGENET_SAMPLE)
	$(PY) -m launcher --trainer 'python -m trainer.imagenet' -- $(IMAGENET_DEFAULTS) $(IMAGENET_ARGS)

## tensorboard: TensorBoard on LOGDIR (default runs/: every local run's tensorboard/ events),
## from a virtual env of its own (build/tensorboard-venv, made once from PyPI: the dev lock
## leaves TensorBoard out, the trainers write with tensorboardX).
TENSORBOARD_VERSION ?= 2.21.0
TENSORBOARD_VENV := build/tensorboard-venv
LOGDIR ?= runs
tensorboard:
	test -x $(TENSORBOARD_VENV)/bin/tensorboard || { $(PYTHON_BOOTSTRAP) -m venv $(TENSORBOARD_VENV) \
		&& $(TENSORBOARD_VENV)/bin/pip install --quiet --disable-pip-version-check \
		tensorboard==$(TENSORBOARD_VERSION); }
	$(TENSORBOARD_VENV)/bin/tensorboard --logdir $(LOGDIR)

## test: the whole suite, deterministic: property tests run hypothesis's "ci" profile (the
## same examples on every machine and every run; make fuzz explores). TensorFlow and torch_xla
## abort when loaded into one process, so they never share a pytest session: launcher tests
## (TensorFlow only in subprocesses), the tests that drive TensorFlow's resolver in-process,
## the trainer tests (torch_xla) on one device, the SPMD tests on 4 CPU devices (SPMD stays on
## in a process once on), then the trainer's numeric tests again with the XLA CPU
## backend capped at NUMERIC_ISA_CAP, which rounds differently from this CPU's widest vectors
## (AVX2 or AVX-512): a tolerance that only held on one machine fails here, not on a user's.
## Likewise the decode's pixel bounds once more with libjpeg-turbo's plain C paths
## (JSIMD_FORCENONE: no SIMD, whose fast IDCT is another code than this CPU's AVX2 one).
NUMERIC_ISA_CAP ?= SSE4_2
# The launcher, trainer, SPMD and numeric tiers on TEST_WORKERS pytest-xdist workers: most of
# their time is one core busy (a process importing torch_xla or TensorFlow, an XLA compile, a test
# waiting for a hung request or a signal), so two workers keep both cores of a 2-core machine
# busy. Trainer and SPMD tiers: worksteal hands each worker a run of consecutive tests, so a
# module's fixtures are mostly made once. The modules that write the checkout's build/ and
# runs/ (marked writes_checkout) run after the launcher tier, in one process, in order
# (xdist's loadgroup does not keep a group on one worker under pytest 9: its renamed node ids
# are ignored). TEST_WORKERS=0: one process, in order.
TEST_WORKERS ?= 2
test: export HYPOTHESIS_PROFILE = ci
test: lint
	$(PY) -m pytest tests/launcher tests/delivery tests/imagebuild -m "not tensorflow and not writes_checkout" -n $(TEST_WORKERS) --dist worksteal
	$(PY) -m pytest tests/delivery -m writes_checkout
	$(PY) -m pytest tests/launcher -m tensorflow
	$(PY) -m pytest tests/trainer -m "not spmd" -n $(TEST_WORKERS) --dist worksteal
	CPU_NUM_DEVICES=4 $(PY) -m pytest tests/trainer -m spmd -n $(TEST_WORKERS) --dist worksteal
	XLA_FLAGS=--xla_cpu_max_isa=$(NUMERIC_ISA_CAP) $(PY) -m pytest tests/trainer -m "numeric and not spmd" -n $(TEST_WORKERS) --dist worksteal
	CPU_NUM_DEVICES=4 XLA_FLAGS=--xla_cpu_max_isa=$(NUMERIC_ISA_CAP) $(PY) -m pytest tests/trainer -m "numeric and spmd" -n $(TEST_WORKERS) --dist worksteal
	JSIMD_FORCENONE=1 $(PY) -m pytest tests/trainer/data/test_jpeg_decode.py tests/trainer/data/test_images.py
	$(MAKE) --no-print-directory test-images

## fuzz: explore: every property test with random seeds and FUZZ_SCALE (30) times its
## examples, and FUZZ_SCALE thousand mutants through the region decoder's C code under ASan
## and UBSan (tests/sanitized_jpeg_region.py; about 7 minutes on 2 cores). A failure prints
## its falsifying example and a @reproduce_failure line, and is kept in .hypothesis/ so the
## next run tries it first; add each one to the test as an explicit @example so make test
## checks it from then on (a sanitizer failure: its seed, for --seed).
FUZZ_SCALE ?= 30
fuzz: export HYPOTHESIS_PROFILE = fuzz
fuzz: export FUZZ_SCALE := $(FUZZ_SCALE)
fuzz: $(VENV_READY)
	status=0; \
	$(PY) -m pytest tests/launcher tests/delivery tests/imagebuild -m "property and not tensorflow" \
		|| status=1; \
	$(PY) -m pytest tests/launcher -m "property and tensorflow" || status=1; \
	$(PY) -m pytest tests/trainer -m property || status=1; \
	$(PY) tests/sanitized_jpeg_region.py --mutants $$(($(FUZZ_SCALE) * 1000)) || status=1; \
	if [ $$status != 0 ]; then echo "make fuzz: falsifying examples above; keep each as an @example"; fi; \
	exit $$status

## test-images: build both stand-in bases and both images with a real Docker engine and run
## real containers through what users do (tests/images). Starts its own dockerd when it is
## root and none answers at DOCKER_HOST; fails with one line when it cannot.
test-images: $(VENV_READY)
	engine="$$(tests/images/engine.sh)" && env $$engine $(PY) -m pytest tests/images

## build / push: the image for RUNTIME (xrt: TPU node, legacy AI Platform; pjrt: TPU VM).
## PIP_CERT (pip's own setting): a CA bundle pip must trust inside the build, passed as a
## build secret, so it never lands in a layer. DOCKER_BUILD_ARGS adds docker build options
## (e.g. --network host on an engine without a bridge network).
DOCKER_BUILD_ARGS ?=
# Where Google's base cannot be pulled, docker's last line is a bare "no such host": name the
# way that needs no Google registry.
build_offline_hint := make build: docker build failed; if it could not pull BASE_IMAGE (offline, \
	no such host, denied), rehearse on a local stand-in instead: make rehearse-container \
	(docs/submitting.md\#rehearse)
build:
	$(call check_runtime)
	$(call require,PROJECT)
	DOCKER_BUILDKIT=1 $(DOCKER) build $(DOCKER_BUILD_ARGS) --build-arg BASE_IMAGE=$(BASE_IMAGE) \
		--build-arg RUNTIME=$(RUNTIME) $(if $(PIP_CERT),--secret id=pip_cert$(comma)src=$(PIP_CERT)) \
		-t $(IMAGE_URI) . $(if $(filter $(BASE_IMAGE_$(RUNTIME)),$(BASE_IMAGE)),|| { \
		status=$$?; echo "$(build_offline_hint)" >&2; exit $$status; })

push:
	$(call check_runtime)
	$(call require,PROJECT)
	$(MAKE) --no-print-directory repository
	$(DOCKER) push $(IMAGE_URI)

## standin-base: a local stand-in for RUNTIME's base image (tpu-standin:xrt|pjrt), made from
## nothing on this machine (debootstrap, pyenv's CPython, PyPI): see standin/build.sh.
standin-base:
	$(call check_runtime)
	DOCKER=$(DOCKER) standin/build.sh $(RUNTIME)

## rehearse-container: the container rehearsal from a fresh machine, without Google's base
## images (standin/rehearse.sh): a Docker engine (yours, or as root one of its own:
## tests/images/engine.sh), the stand-in base (make standin-base, once), the image built on it
## (make build ... DOCKER_BUILD_ARGS=--network=host) and a short run of it on fake data;
## outputs in runs/rehearsal-DATE. RUNTIME=pjrt (the xrt stand-in has no torch_xla).
REHEARSAL_IMAGE ?= tpu-xla-rehearsal:$(RUNTIME)
rehearse-container:
	$(call check_runtime)
	RUNTIME=$(RUNTIME) DOCKER=$(DOCKER) REHEARSAL_IMAGE=$(REHEARSAL_IMAGE) standin/rehearse.sh

## rehearse-env: the shell lines that point this shell's docker at the engine the rehearsal
## started (its DOCKER_HOST; a client that builds with BuildKit first on PATH), so that the
## docs' docker and make commands reach it: eval "$(make -s rehearse-env)". A comment
## alone where the docker client reaches an engine already; one line and exit 69 where none
## runs. (TPU_XLA_ENGINE_DIR: the engine's folder, default /var/lib/tpu-xla-dockerd.)
rehearse-env:
	@tests/images/engine.sh env

## rehearse-stop: stop the engine the rehearsal started (if it runs), and say where its data
## root is and how large: the stand-in and the images stay there for the next rehearsal.
rehearse-stop:
	@tests/images/engine.sh stop

## repository: create the Artifact Registry repository IMAGE_URI points at, if it is missing
## (a no-op for gcr.io/... URIs). Docker also needs `gcloud auth configure-docker HOST` once.
AR_HOST := $(firstword $(subst /, ,$(IMAGE_URI)))
repository:
	$(call require,PROJECT)
	@case "$(AR_HOST)" in *-docker.pkg.dev) ;; *) echo "$(AR_HOST) is not Artifact Registry: nothing to create"; exit 0 ;; esac; \
	$(GCLOUD) artifacts repositories describe $(REPOSITORY) --project $(PROJECT) \
		--location $(IMAGE_REGION) >/dev/null 2>&1 || \
	$(GCLOUD) artifacts repositories create $(REPOSITORY) --project $(PROJECT) \
		--location $(IMAGE_REGION) --repository-format docker \
		--description "PyTorch/XLA training images"

## cloudbuild: build and push with Cloud Build instead of a local Docker engine (tags
## IMAGE_URI and the immutable IMAGE_URI-BUILD_ID).
cloudbuild:
	$(call check_runtime)
	$(MAKE) --no-print-directory repository
	$(GCLOUD) builds submit --project $(PROJECT) --region $(REGION) --config cloudbuild.yaml \
		--substitutions _RUNTIME=$(RUNTIME),_BASE_IMAGE=$(BASE_IMAGE),_IMAGE_URI=$(IMAGE_URI) .

## check-job: fill the image (and JOB_ARGS and BASE_OUTPUT_DIR for Vertex) into CONFIG, validate
## it offline.
check-job: $(VENV_READY)
	$(call require,PROJECT)
	mkdir -p build
	$(PY) -m jobspec check $(CONFIG) --image $(IMAGE_URI) --region $(REGION) \
		--base-image $(BASE_IMAGE) --container-args="$$JOB_ARGS" --write $(RENDERED) \
		$(if $(BASE_OUTPUT_DIR),--base-output-dir "$(BASE_OUTPUT_DIR)")

# The submit targets ask the registry for IMAGE_URI first: a job naming an image that was
# never pushed would fail only once the platform has started its machines. Artifact Registry
# answers gcloud (the tool that submits); any other registry (gcr.io included) Docker's
# manifest lookup, with Docker's login. One line on failure: the tool's own sentence (gcloud's
# first ERROR line, else the last line) and the fix. gcloud without a logged-in account says
# so in a paragraph that ends "... to select an already authenticated account to use.", and
# names `gcloud auth login`: that is the fix then, not a push.
image_lookup = $(if $(filter %-docker.pkg.dev,$(AR_HOST)),$(GCLOUD) artifacts docker images describe $(IMAGE_URI),$(DOCKER) manifest inspect $(IMAGE_URI))
# Shell for a failed lookup whose stderr is in $$err: sets $$said (the tool's sentence) and,
# where no gcloud account is logged in, says so in one line and exits 1 (make submit-gke's
# digest lookup uses it too).
lookup_said = said="$$(printf '%s\n' "$$err" | grep -m 1 '^ERROR:' || printf '%s\n' "$$err" | tail -n 1)";
lookup_needs_login = $(lookup_said) case "$$err" in *"gcloud auth login"*) echo "make $@: gcloud could not ask the registry for IMAGE_URI $(IMAGE_URI): no account is logged in ($$said); HINT: run gcloud auth login (or gcloud config set account ACCOUNT), then make $@ again" >&2; exit 1 ;; esac;
define require_pushed
@err="$$($(image_lookup) 2>&1 >/dev/null)" || { \
  $(lookup_needs_login) \
  echo "make $@: IMAGE_URI $(IMAGE_URI) is not in its registry ($$said); HINT: push it first (make build push PROJECT=$(PROJECT) RUNTIME=$(RUNTIME)), or set IMAGE_URI to a pushed image" >&2; \
  exit 1; }
endef

## submit: legacy AI Platform Training (stopped accepting jobs on 2025-01-31; image profile
## xrt). Refuses an IMAGE_URI its registry does not have.
submit: RUNTIME = xrt
submit: REQUIRED_BY = submit
submit: check-job
	$(require_pushed)
	$(PY) -m jobspec exec $(GCLOUD) ai-platform jobs submit training $(JOB_NAME) \
		--project $(PROJECT) --region $(REGION) --config $(RENDERED) \
		$(if $(JOB_DIR),--job-dir $(JOB_DIR)) --

## submit-vertex: Vertex AI custom job with a TPU worker pool (image profile pjrt);
## BASE_OUTPUT_DIR=gs://BUCKET/DIR is where its outputs and checkpoints go. Refuses an
## IMAGE_URI its registry does not have; keeps the job's name in build/vertex-job for
## vertex-status, vertex-logs and vertex-cancel.
VERTEX_JOB_FILE := build/vertex-job
submit-vertex: CONFIG = $(VERTEX_CONFIG)
submit-vertex: RUNTIME = pjrt
submit-vertex: REQUIRED_BY = submit-vertex
submit-vertex: check-job
	$(require_pushed)
	$(GCLOUD) ai custom-jobs create --project $(PROJECT) --region $(REGION) \
		--display-name $(JOB_NAME) --config $(RENDERED) --format='value(name)' \
		> $(VERTEX_JOB_FILE).new.$$PPID
	mv $(VERTEX_JOB_FILE).new.$$PPID $(VERTEX_JOB_FILE)
	@echo "submitted $$(cat $(VERTEX_JOB_FILE)): make vertex-status, vertex-logs or vertex-cancel"

## vertex-status / vertex-logs / vertex-cancel: describe, follow the logs of, or cancel the
## Vertex AI job make submit-vertex submitted last (VERTEX_JOB=ID or its full name for
## another one; a bare ID needs PROJECT and REGION).
VERTEX_JOB ?= $(shell cat $(VERTEX_JOB_FILE) 2>/dev/null)
vertex_job_args = $(VERTEX_JOB) $(if $(findstring /,$(VERTEX_JOB)),,$(call require,PROJECT)--project $(PROJECT) --region $(REGION))
vertex-status vertex-logs vertex-cancel: vertex-%:
	$(if $(strip $(VERTEX_JOB)),,$(error VERTEX_JOB is not set and $(VERTEX_JOB_FILE) holds no job: make submit-vertex first, or make $@ VERTEX_JOB=ID PROJECT=... REGION=...))
	$(GCLOUD) ai custom-jobs $(vertex_verb_$*) $(vertex_job_args)
vertex_verb_status := describe
vertex_verb_logs := stream-logs
vertex_verb_cancel := cancel

## submit-gke: a JobSet on one TPU slice of a GKE cluster (docs/gke.md; image profile pjrt):
## fills the image by digest, JOB_ARGS (they replace the template's args) and GKE_JOB_NAME into
## GKE_CONFIG, checks it, writes build/GKE_JOB_NAME.yaml and creates it with CLUSTER's kubectl
## context (gcloud container clusters get-credentials makes it); without kubectl it prints the
## manifest and the command. The digest (IMAGE_URI@sha256:..., or asked of Artifact Registry
## for a tag) pins every host and every restart to one image: a tag pushed again would run new
## code beside old in one SPMD program. `create`, not `apply`: an existing name is refused,
## never patched while it runs.
GKE_CONFIG ?= config/gke-jobset-v5e-16.yaml
CLUSTER ?=
CLUSTER_LOCATION ?= $(REGION)
KUBECTL ?= kubectl
GKE_JOB_NAME_ORIGIN := $(origin GKE_JOB_NAME)
GKE_JOB_NAME ?= pytorch-xla-$(shell date +%Y%m%d-%H%M%S)
GKE_JOB_NAME := $(GKE_JOB_NAME)
GKE_CONTEXT ?= gke_$(PROJECT)_$(CLUSTER_LOCATION)_$(CLUSTER)
# The JobSet make submit-gke created last (gke-status, gke-logs and gke-delete default to it).
GKE_LAST_JOB := build/gke-last-job
# What make gke-status, gke-logs and gke-delete need to reach the JobSet just created: the
# cluster's kubectl context (PROJECT, REGION, CLUSTER, and the context's other parts where they
# were given), the kubectl given, and the JobSet's name (the remembered one is overwritten by
# the next submit).
gke_follow_up_args = $(strip PROJECT=$(PROJECT) REGION=$(REGION) CLUSTER=$(CLUSTER) $(foreach var,CLUSTER_LOCATION GKE_CONTEXT KUBECTL,$(if $(filter file default,$(origin $(var))),,$(var)=$($(var)))) GKE_JOB_NAME=$(GKE_JOB_NAME))
submit-gke: RUNTIME = pjrt
submit-gke: $(VENV_READY)
	$(call require,PROJECT)
	$(call require,CLUSTER)
	mkdir -p build
	@case "$(IMAGE_URI)" in \
	  *@sha256:*) image="$(IMAGE_URI)" ;; \
	  *) digest="$$($(GCLOUD) artifacts docker images describe "$(IMAGE_URI)" \
	       --format='value(image_summary.digest)' 2>build/registry-lookup.err)" || { \
	       err="$$(cat build/registry-lookup.err)"; $(lookup_needs_login) digest=; }; \
	     cat build/registry-lookup.err >&2; \
	     case "$$digest" in \
	       sha256:*) image="$$(echo "$(IMAGE_URI)" | sed -E 's,:[^:/]+$$,,')@$$digest" ;; \
	       *) echo "error: IMAGE_URI=$(IMAGE_URI): the registry gave no digest for this tag" \
	            "(gcloud artifacts docker images describe); a tag can move, and the slice's hosts" \
	            "and restarts could run different images" >&2; \
	          echo "HINT: make push PROJECT=$(PROJECT) RUNTIME=pjrt first, or give" \
	            "IMAGE_URI=HOST/PATH@sha256:DIGEST" >&2; exit 1 ;; \
	     esac ;; \
	esac; \
	echo "image: $$image"; \
	$(PY) -m jobspec check $(GKE_CONFIG) --image "$$image" --base-image $(BASE_IMAGE) \
		--name $(GKE_JOB_NAME) $${JOB_ARGS:+--container-args="$$JOB_ARGS"} \
		--write build/$(GKE_JOB_NAME).yaml
	@if command -v $(KUBECTL) >/dev/null 2>&1; then \
	  $(KUBECTL) --context $(GKE_CONTEXT) create -f - < build/$(GKE_JOB_NAME).yaml && \
	  echo $(GKE_JOB_NAME) > $(GKE_LAST_JOB) && \
	  echo "submitted $(GKE_JOB_NAME): make gke-status / gke-logs / gke-delete" \
	    "$(gke_follow_up_args)"; \
	else \
	  cat build/$(GKE_JOB_NAME).yaml; \
	  echo "$(KUBECTL) not found; to submit the manifest above:"; \
	  echo "  $(KUBECTL) --context $(GKE_CONTEXT) create -f - < build/$(GKE_JOB_NAME).yaml"; \
	fi

## gke-status / gke-logs / gke-delete: the JobSet GKE_JOB_NAME names (default: the one make
## submit-gke created last) on CLUSTER: its state and restarts and its pods; every host's log,
## each line prefixed with its pod (up to GKE_LOG_STREAMS hosts; kubectl's own limit is 5),
## followed from when the pods start (waiting up to GKE_LOG_WAIT seconds, asking kubectl every
## GKE_LOG_POLL) through each restart
## until the JobSet ends (exit 0: Completed, 1: Failed); stop it and delete it with its pods
## (its checkpoints stay in the job dir: submitting the same JOB_ARGS again resumes).
GKE_LOG_STREAMS ?= 64
GKE_LOG_WAIT ?= 900
GKE_LOG_POLL ?= 5
GKE_JOB = $(if $(filter undefined,$(GKE_JOB_NAME_ORIGIN)),$(shell cat $(GKE_LAST_JOB) 2>/dev/null),$(GKE_JOB_NAME))
GKE_SELECTOR = -l jobset.sigs.k8s.io/jobset-name=$(GKE_JOB)
gke_job_required = $(call require,PROJECT)$(call require,CLUSTER)$(if $(GKE_JOB),,$(error no JobSet: make submit-gke first, or name one: make $@ GKE_JOB_NAME=NAME))
.PHONY: gke-status gke-logs gke-delete
gke-status:
	$(call gke_job_required)
	$(KUBECTL) --context $(GKE_CONTEXT) get jobset $(GKE_JOB)
	$(KUBECTL) --context $(GKE_CONTEXT) get pods $(GKE_SELECTOR) -o wide

gke-logs: $(VENV_READY)
	$(call gke_job_required)
	$(PY) -m jobspec.gke_logs --context $(GKE_CONTEXT) --kubectl "$(KUBECTL)" \
		--streams $(GKE_LOG_STREAMS) --wait $(GKE_LOG_WAIT) --poll $(GKE_LOG_POLL) $(GKE_JOB)

gke-delete:
	$(call gke_job_required)
	$(KUBECTL) --context $(GKE_CONTEXT) delete jobset $(GKE_JOB)

## local-run: rehearse in the built image (IMAGE_URI) with the entrypoint overridden and the
## platform's variables, as the original article did; --dry-run prints what the launcher would
## export and run. RUNTIME=pjrt: Vertex AI's CLUSTER_SPEC for a CPU pool (no TPU, no network
## needed). RUNTIME=xrt: the TPU node TPU_NODE (in TPU_ZONE, PROJECT), which the launcher
## resolves: that needs the node, the network and Google credentials in the container.
## DOCKER_RUN_ARGS adds docker run options (e.g. --network host -e TPU_API_DISCOVERY_URL=...).
## JOB_ARGS reach the launcher word for word, as on the platforms (`python -m jobspec exec`).
DOCKER_RUN_ARGS ?=
LOCAL_ENV_xrt = -e TF_CONFIG='$(LOCAL_TF_CONFIG)' -e TPU_CONFIG='$(LOCAL_TPU_CONFIG)'
LOCAL_ENV_pjrt = -e CLUSTER_SPEC='$(LOCAL_CLUSTER_SPEC)'
# xrt resolves a real TPU node: without TPU_NODE (or a LOCAL_TPU_CONFIG of one's own) the
# launcher could only refuse the empty name.
local_run_needs_tpu = $(and $(filter xrt,$(RUNTIME)),$(filter file,$(origin LOCAL_TPU_CONFIG)),$(if $(strip $(TPU_NODE)),,1))
local-run: $(VENV_READY)
	$(call check_runtime)
	$(call require,PROJECT)
	$(if $(local_run_needs_tpu),$(error TPU_NODE is not set: make local-run RUNTIME=xrt TPU_NODE=NAME resolves that TPU node; RUNTIME=pjrt rehearses without a TPU))
	$(PY) -m jobspec exec $(DOCKER) run --rm --shm-size 16G --entrypoint python \
		$(DOCKER_RUN_ARGS) $(LOCAL_ENV_$(RUNTIME)) $(IMAGE_URI) -m launcher --dry-run

# The GKE templates' arguments hold bucket placeholders (make submit-gke JOB_ARGS=... replaces
# them): lint checks them with arguments of the same shape.
LINT_GKE_ARGS := --data_dir=gs://lint-bucket/imagenet --job-dir=gs://lint-bucket/jobs/lint
## lint: ruff, vermin (Python 3.7 in the image code, the SBOM writer and the pip check), hadolint,
## check-jsonschema, yamllint.
lint: $(VENV_READY)
	$(VENV)/bin/ruff check launcher trainer jobspec imagebuild tests bench
	$(VENV)/bin/vermin --target=3.7- --no-tips --violations --eval-annotations \
		--backport dataclasses --backport typing launcher trainer imagebuild/sbom.py imagebuild/pip_check.py
	$(VENV)/bin/hadolint Dockerfile standin/xrt.Dockerfile standin/pjrt.Dockerfile docs/examples/*/Dockerfile
	$(VENV)/bin/check-jsonschema --builtin-schema vendor.cloudbuild cloudbuild.yaml
	$(PY) -m jobspec cloudbuild cloudbuild.yaml
	$(VENV)/bin/yamllint -s -d '{extends: default, rules: {line-length: {max: 100}, document-start: disable}}' \
		cloudbuild.yaml config .hadolint.yaml
	for f in config/*.yaml; do \
	  case $$f in config/vertex-*) set -- --base-output-dir gs://my-bucket/out ;; \
	    config/gke-*) set -- --container-args="$(LINT_GKE_ARGS)" ;; *) set -- ;; esac; \
	  $(PY) -m jobspec check $$f --image gcr.io/p/i:t "$$@" || exit 1; \
	done

## bench: launcher reaction and overhead, trainer start-up and its system calls, trainer
## throughput, lazy vs compiled steps, cold vs warm compile cache, SPMD over 1/2/4 CPU devices,
## the ImageNet input pipeline on real photographs and its epoch boundary, host 0 of v5e-256
## scaled (device busy share), where a run's time goes (input wait), the trainer process's CPU
## against its data workers', a data worker's CPU per image against fa6bc49's decode, how a
## step's work units fall on the workers, which of its threads work, trainer.train against a
## plain torch_xla loop, the input stream at the host's size against a stand-in step (a
## GPU step where CUDA is) and the reference pipeline, and what the damaged-image checks cost
## where nothing is damaged and each kind of damage, gradient accumulation's cost per
## example, trainer.lm's tokens/s with FSDP against dp on 4 devices, and a split state's
## checkpoint as each host's pieces against gathered whole first, an epoch's start on a
## 100 B-token corpus, and a streamed token window's CPU (bench/*.py; about
## 100 minutes on 2 cores). bench/spmd.py --reference-examples DIR also runs pytorch/xla's SPMD example.
BENCHES := launcher startup trainer step_paths spmd data listing run_timing checkpoint_copy \
           checkpoint_write epoch_boundary host_simulation feed_cpu \
           "decode_pairs --per-class 10 --rounds 3" worker_balance trainer_threads own_loop feed \
           trainer_ceiling damage_checks "grad_accum --runs 3 --steps 12" lm checkpoint_pieces \
           epoch_rows token_stream
bench: $(VENV_READY)
	for bench in $(BENCHES); do \
	  set -- $$bench; name=$$1; shift; echo "== bench/$$name.py"; \
	  $(PY) bench/$$name.py "$$@" || exit 1; \
	done

## bench-images: build times and sizes of both image profiles (BENCH_ARGS=--cold: from nothing).
BENCH_ARGS ?=
bench-images: $(VENV_READY)
	engine="$$(tests/images/engine.sh)" && env $$engine $(PY) bench/images.py $(BENCH_ARGS)

## lock: make lock-dev and make lock-images.
lock: lock-dev lock-images

## lock-dev: re-resolve requirements/dev.in into requirements/dev.lock, every package with the
## sha256 of its file (imagebuild/dev_lock.py; make venv installs it with --require-hashes).
lock-dev:
	rm -rf /tmp/lock-venv && $(PYTHON_BOOTSTRAP) -m venv /tmp/lock-venv
	/tmp/lock-venv/bin/pip install --quiet --no-cache-dir -r requirements/dev.in
	# --all: plain freeze hides wheel, which astunparse (TensorFlow's) requires; without it a
	# fresh venv fails pip check. pip and setuptools are the venv's own (ensurepip).
	/tmp/lock-venv/bin/pip freeze --all --exclude-editable | grep -Ev '^(pip|setuptools)==' \
		> /tmp/lock-venv/frozen.txt
	/tmp/lock-venv/bin/python -m imagebuild.dev_lock /tmp/lock-venv/frozen.txt requirements/dev.lock

## lock-images: requirements/image-xrt.lock and image-pjrt.lock, every package each Dockerfile
## build installs with its sha256, resolved by pip inside the stand-ins (imagebuild/lock.py;
## builds them when missing). The existing locks' pins are kept (only a moved top-level pin
## moves what it needs); UPGRADE=1 re-resolves from scratch. PIP_CERT: a CA bundle pip must
## trust, mounted read-only.
UPGRADE ?=
lock-images: $(VENV_READY)
	engine="$$(tests/images/engine.sh)" && \
	for runtime in xrt pjrt; do \
	  env $$engine $(DOCKER) image inspect tpu-standin:$$runtime >/dev/null 2>&1 || \
	    env $$engine $(MAKE) --no-print-directory standin-base RUNTIME=$$runtime || exit 1; \
	done && env $$engine $(PY) -m imagebuild.lock xrt pjrt $(if $(UPGRADE),--upgrade)

## standin-pins: the sha256 of each file the stand-ins install, into standin/RUNTIME-pins.txt
## (edit the versions there by hand; imagebuild/standin_pins.py asks pip in the stand-ins).
standin-pins: $(VENV_READY)
	engine="$$(tests/images/engine.sh)" && env $$engine $(PY) -m imagebuild.standin_pins xrt pjrt

## pin-bases: pin each profile's base image to the digest its tag points at now, asked of the
## registry's API without pulling (imagebuild/pin_bases.py; gcloud's token where the
## registry refuses an anonymous one): Makefile, Dockerfile, cloudbuild.yaml and
## jobspec/images.py then name NAME:TAG@sha256:..., which Docker pulls by the digest alone (the
## tag is ignored): a tag pushed again changes nothing until pin-bases runs again.
pin-bases: $(VENV_READY)
	$(PY) -m imagebuild.pin_bases

## sbom: print the CycloneDX SBOM the build wrote into IMAGE_URI (/app/sbom.cdx.json) and keep
## a copy in build/sbom-RUNTIME.cdx.json.
sbom:
	$(call check_runtime)
	$(call require,PROJECT)
	mkdir -p build
	$(DOCKER) run --rm --network none --entrypoint cat $(IMAGE_URI) /app/sbom.cdx.json \
		| tee build/sbom-$(RUNTIME).cdx.json

## clean: remove .venv and the test caches.
clean:
	rm -rf $(VENV) .pytest_cache .hypothesis trainer/data/_jpeg_region.*.so

## help: this list (also what `make` alone prints): each target's `##` comment in this
## Makefile. Variables and their defaults: docs/submitting.md.
help:
	@echo "usage: make TARGET [NAME=value ...]"
	@awk '/^## / { text = substr($$0, 4); print (block ? "      " : "\n  ") text; block = 1; next } \
		{ block = 0 }' $(firstword $(MAKEFILE_LIST))
