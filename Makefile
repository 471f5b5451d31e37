# The two commands of the README. Both create or reuse .venv/ first.
PYTHON := .venv/bin/python

# make demo: the LVIS APA* Mask R-CNN and its SE-ReLU baseline, trained and
# tested with the real job's launchers (tools/dist_train.sh, tools/dist_test.sh)
# on the generated LVIS v1-format set.
DEMO_DIR := work_dirs/demo
DEMO_PROCS := 2
# One thread per process: the demo's numbers repeat for a given thread count.
# The launchers get PYTHON: the demo runs in .venv whatever environment is
# activated (without it they would take an activated one first).
DEMO_ENV := OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
APA_TOY := configs/toy/apa_mrcnn_r50_toy.py
SE_TOY := configs/toy/se-relu_mrcnn_r50_toy.py
APA_DIR := $(DEMO_DIR)/apa_mrcnn_r50_toy
SE_DIR := $(DEMO_DIR)/se-relu_mrcnn_r50_toy

.PHONY: env env-torch2.1 demo demo-stock test test-torch2.1 data docs

env:
	bash tools/setup_env.sh

data: env
	$(PYTHON) tools/misc/generate_toy_data.py --out-dir data/

# Each step stops the demo on failure, so the table is only printed from
# two finished trainings and tests.
demo: env
	@echo "== [1/7] toy LVIS v1 data in data/toy_lvis"
	$(PYTHON) tools/misc/generate_toy_data.py lvis --out-dir data/ --skip-complete
	rm -rf $(DEMO_DIR)
	@echo "== [2/7] train APA*+AGLU ResNet-50 Mask R-CNN ($(DEMO_PROCS) processes)"
	$(DEMO_ENV) PYTHON=$(PYTHON) tools/dist_train.sh $(APA_TOY) $(DEMO_PROCS) --work-dir $(APA_DIR)
	@echo "== [3/7] test it"
	$(DEMO_ENV) PYTHON=$(PYTHON) tools/dist_test.sh $(APA_TOY) $$(cat $(APA_DIR)/last_checkpoint) $(DEMO_PROCS) --work-dir $(APA_DIR)
	@echo "== [4/7] train the SE-ReLU ResNet-50 baseline"
	$(DEMO_ENV) PYTHON=$(PYTHON) tools/dist_train.sh $(SE_TOY) $(DEMO_PROCS) --work-dir $(SE_DIR)
	@echo "== [5/7] test it"
	$(DEMO_ENV) PYTHON=$(PYTHON) tools/dist_test.sh $(SE_TOY) $$(cat $(SE_DIR)/last_checkpoint) $(DEMO_PROCS) --work-dir $(SE_DIR)
	@echo "== [6/7] learned APA / AGLU parameters and curves"
	$(DEMO_ENV) $(PYTHON) tools/analysis/plot_activations.py $(APA_TOY) $$(cat $(APA_DIR)/last_checkpoint) --out-dir $(DEMO_DIR)/apa_activations
	@echo "== [7/7] side by side"
	$(DEMO_ENV) $(PYTHON) tools/analysis/compare_runs.py "APA*+AGLU R50=$(APA_DIR)" "SE-ReLU R50=$(SE_DIR)" --out $(DEMO_DIR)/summary.json

# The smaller stock check: plain mmdet Mask R-CNN R50 on the toy COCO and
# LVIS sets, one process each.
demo-stock: env
	$(PYTHON) tools/misc/generate_toy_data.py coco lvis --out-dir data/ --skip-complete
	rm -rf work_dirs/toy-coco work_dirs/toy-lvis
	$(PYTHON) tools/train.py configs/toy/mask-rcnn_r50_fpn_toy-coco.py --work-dir work_dirs/toy-coco
	$(PYTHON) tools/train.py configs/toy/mask-rcnn_r50_fpn_toy-lvis.py --work-dir work_dirs/toy-lvis
	$(PYTHON) tools/test.py configs/toy/mask-rcnn_r50_fpn_toy-coco.py work_dirs/toy-coco/epoch_8.pth --work-dir work_dirs/toy-coco

# The suite on every core: pytest-xdist workers, one torch thread each
# (tests/conftest.py), a module at a time (its module fixtures built once),
# the modules with slow tests first; the 25 slowest tests are printed.
# PYTEST_ARGS= runs it in one process. Bytecode is written (__pycache__/,
# git-ignored) even where PYTHONDONTWRITEBYTECODE is set: every worker and the
# hundreds of Python processes the tests start would otherwise compile mmact,
# the tools and the rewritten test modules again (5 s per collection).
PYTEST_ARGS ?= -n auto --maxprocesses 8 --dist loadscope --no-loadscope-reorder --durations=25
WITH_BYTECODE := PYTHONDONTWRITEBYTECODE=

test: env
	$(WITH_BYTECODE) $(PYTHON) -m pytest tests $(PYTEST_ARGS)

# The docs site (Sphinx + MyST) into docs/_build/html; a warning (a broken link
# or section, a docstring autodoc cannot read) fails it.
docs: env
	rm -rf docs/_build
	$(PYTHON) -m sphinx -W --keep-going -q -b html docs docs/_build/html

# The users' stack (docs/get_started.md, "Supported versions"): torch 2.1.2,
# Triton 2.1, numpy < 2, in .venv-torch2.1/. CI runs it after `make test`, with the
# config sweep (every shipped config trains a step and evaluates) cut to the
# toy configs and configs/lvis/apa_mrcnn_r50.py, and without the tests
# marked stack_independent: they run no torch operator, numpy function or
# process and import nothing of the stack, so their outcome cannot depend on
# it (the rule: mmact/testing/stack_rule.py; tests/conftest.py holds each
# marked test to it in `make test`), and without the GPU check's dry run:
# it checks the script's parts, arguments and gpu.json keys for the GPU
# machine's stack (tools/gpu/gpu_wheels.sh), and the tools its parts run are
# tested on this stack by their own tests.
TORCH21_PYTEST_ARGS ?= -k '(not test_config_trains_and_evaluates or _toy or apa_mrcnn_r50) and not test_dry_run_runs_every_part' -m 'not stack_independent'

env-torch2.1:
	MMACT_STACK=torch2.1 bash tools/setup_env.sh

test-torch2.1: env-torch2.1
	$(WITH_BYTECODE) .venv-torch2.1/bin/python -m pytest tests $(PYTEST_ARGS) $(TORCH21_PYTEST_ARGS)

# Triton 3.6's interpreter (the Triton of torch 2.11) with .venv's numpy
# (>= 2.4), where Triton < 3.8 needs mmact.testing.triton_interpreter:
# Triton 3.6.0 installed beside .venv's, without dependencies, into
# .triton3.6/ (put first on PYTHONPATH). Runs the patch's own tests and the
# Triton cases that together run every line and branch of the APA and FleS
# kernel files in the interpreter, as the whole set of cases does (traced
# per line pair on Triton 3.6); the whole set runs on Triton 3.8 in
# `make test`.
TRITON36_DIR := .triton3.6
TRITON36_ENV := PYTHONPATH=$(CURDIR)/$(TRITON36_DIR) TRITON_INTERPRET=1 MMACT_TRITON=1 MMACT_TEST_DEVICE=cpu
APA_CASES := tests/test_ops/test_apa/triton_cases.py
FLES_CASES := tests/test_ops/test_fles/triton_cases.py
TRITON36_TESTS := \
	'$(APA_CASES)::test_nchw_odd_sizes[1-dtype0-apa]' \
	'$(APA_CASES)::test_channels_last_memory_format[aglu]' \
	$(APA_CASES)::test_only_some_gradients \
	'$(APA_CASES)::test_rebuilt_backward[channel-False-nchw-1-1-apa]' \
	'$(APA_CASES)::test_rebuilt_backward[sample-True-channels_last-1-1-aglu]' \
	'$(APA_CASES)::test_rebuilt_backward_half_sources[dtype1]' \
	'$(APA_CASES)::test_rebuilt_backward_partial_sources_and_several_tiles[nchw]' \
	'$(FLES_CASES)::test_mean_indicator_global_window_dtypes[dtype1]' \
	'$(FLES_CASES)::test_gates_on_odd_tiles[sigmoid]' \
	$(FLES_CASES)::test_extreme_inputs \
	tests/test_testing/test_triton_interpreter.py

.PHONY: test-triton3.6
test-triton3.6: env
	@[ -f $(TRITON36_DIR)/.complete ] || { rm -rf $(TRITON36_DIR) && \
		$(PYTHON) -m pip install --quiet --disable-pip-version-check --no-deps \
		--target $(TRITON36_DIR) triton==3.6.0 && touch $(TRITON36_DIR)/.complete; }
	$(TRITON36_ENV) $(PYTHON) -c 'import sys, triton; print("Triton", triton.__version__, "from", triton.__file__); sys.exit(triton.__version__ != "3.6.0")'
	$(TRITON36_ENV) $(PYTHON) -m pytest -p no:cacheprovider -q --durations=5 $(TRITON36_TESTS)

# The speed guard: the C kernels' ratios to the native ops (AGLU / SiLU,
# APA / Sigmoid, FleS / GELU at the CPU benchmarks' shapes, and the host
# cost per call) against their ceilings per vector ISA
# (tools/benchmarks/bench_guard_ceilings.json); fails naming a ratio over
# its ceiling or one it could not measure.
.PHONY: bench-guard
bench-guard: env
	$(PYTHON) tools/benchmarks/bench_guard.py
