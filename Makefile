# Thin wrappers over the `course` command (graders/cli.py) and the stock tools.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
FAST ?= 0
DEVICE ?= auto
WORKERS ?= auto

.PHONY: setup system-packages test-packages hub-packages data run test test-fast test-browser test-hub wheel lab hub \
	release grade check bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[pinned,grading,dev]'
	touch $(STAMP)

# The Debian packages (FashionMNIST, the grader's sandbox): installed when root or passwordless
# sudo allows it, otherwise make stops with the one command to run.
system-packages:
	@$(PYTHON) tools/system_packages.py

# What only the tests need besides: Chromium, for the lessons in JupyterLab.
test-packages:
	@$(PYTHON) tools/system_packages.py --tests

# The course's JupyterHub: JupyterHub itself (pyproject's `hub` extra) and its proxy (Debian's).
HUB_STAMP := $(VENV)/.hub-installed
$(HUB_STAMP): pyproject.toml $(STAMP)
	$(BIN)/pip install --quiet -e '.[pinned,grading,dev,hub]'
	touch $(HUB_STAMP)

hub-packages:
	@$(PYTHON) tools/system_packages.py --hub

data: system-packages $(STAMP)
	$(BIN)/course data

setup: system-packages $(STAMP) data

run: setup
	$(BIN)/course run --device $(DEVICE) $(if $(filter 1,$(FAST)),--fast)

PYTEST := PATH="$(CURDIR)/$(BIN):$$PATH" MPLBACKEND=Agg $(BIN)/python -m pytest

# One run: test workers execute notebooks side by side, one math thread each to avoid oversubscribing;
# the class grader's tests run beside the others, since they mostly wait on their kernels. A third of
# the suite's time is such waiting (kernels, time limits, servers), so there is one worker more than
# cores. The costliest tests start first, and the tests sharing a module's fixture (a class graded
# once, a Dask cluster) go to one worker (tests/conftest.py).
TEST_WORKERS := $(if $(filter-out auto,$(WORKERS)),$(WORKERS),$(shell echo $$(( $$(nproc) + 1 ))))
test: setup test-packages
	OMP_NUM_THREADS=1 $(PYTEST) -n $(TEST_WORKERS) --dist loadgroup -m "not (second_edition or hub)"

# The quick loop while working: nothing that starts a kernel, a subprocess, torchrun or Dask (a test
# that does fails and names the marker it lacks: --no-processes), no class grading, no browser.
FAST_TIER := not (kernel or subprocess or torchrun or dask or classroom or browser or second_edition)
test-fast: setup
	OMP_NUM_THREADS=1 $(PYTEST) -n $(WORKERS) --dist worksteal -m "$(FAST_TIER)" --no-processes

# Every lesson of both editions in JupyterLab in headless Chromium; screenshots in build/browser/.
test-browser: setup test-packages
	OMP_NUM_THREADS=1 $(PYTEST) -n $(WORKERS) --dist worksteal -m "browser and not hub"

# A real JupyterHub with local users, a lesson's whole loop through nbgrader's exchange
# (tests/test_hub.py). It creates and removes accounts, so it runs as root (through sudo -n when
# that asks no password).
AS_ROOT := $(if $(filter 0,$(shell id -u)),,sudo -n env)
test-hub: setup test-packages hub-packages $(HUB_STAMP)
	$(AS_ROOT) OMP_NUM_THREADS=1 $(PYTEST) -p no:xdist -m hub tests/test_hub.py

# The course as one package (lesson helpers, checks, graders) for Colab, a JupyterHub or a Dask
# worker: pip install dist/pytorch_course-*.whl
wheel: $(STAMP)
	$(BIN)/pip wheel --no-deps --quiet -w dist .

lab: setup
	$(BIN)/jupyter lab notebooks/

# The course on a JupyterHub of its own, as root: docs/instructors/jupyterhub.md. Users import the
# course from its wheel, built first.
hub: setup hub-packages $(HUB_STAMP) wheel
	$(BIN)/course hub serve $(if $(ROSTER),--roster $(ROSTER)) $(if $(HUB_IP),--ip $(HUB_IP)) \
		$(if $(HUB_PORT),--port $(HUB_PORT)) $(if $(HUB_AUTH),--authenticator $(HUB_AUTH)) \
		$(if $(HUB_MEMORY),--memory $(HUB_MEMORY)) $(if $(HUB_CPUS),--cpus $(HUB_CPUS)) \
		$(if $(HUB_CULL),--cull-idle $(HUB_CULL)) $(if $(filter 1,$(FAST)),--fast)

release: setup
	$(BIN)/course release

grade: setup
	@test -n "$(SUBMISSIONS)" -a -n "$(LESSON)" || { echo "usage: make grade SUBMISSIONS=<folder or zip> LESSON=<NN_slug> [EXPORT='moodle canvas csv'] [SCHEDULER=tcp://HOST:8786]"; exit 2; }
	$(BIN)/course grade "$(SUBMISSIONS)" --lesson $(LESSON) $(if $(filter-out auto,$(WORKERS)),--workers $(WORKERS)) \
		$(if $(SCHEDULER),--scheduler $(SCHEDULER)) $(foreach platform,$(EXPORT),--export $(platform))

check: setup
	@test -n "$(NOTEBOOK)" || { echo "usage: make check NOTEBOOK=<path to your notebook>"; exit 2; }
	$(BIN)/course check "$(NOTEBOOK)"

# Speed and memory figures, printed; tests check behaviour, these measure it.
bench: setup
	MPLBACKEND=Agg $(BIN)/python tests/benchmarks/lesson_helpers.py
	$(BIN)/python tests/benchmarks/class_grading.py
	MPLBACKEND=Agg $(BIN)/python tests/benchmarks/after_grading.py

clean:
	rm -rf build
